"""The grader's seal on a graded kernel: an audit hook that alone reports verdicts to the grader.

The grader (:mod:`grade`) runs a submitted notebook in a kernel where the student's cells and
the grader's check cells share one interpreter, so nothing the kernel prints or keeps can be
trusted: a solution cell can rebind ``grade.report``, swap a checker's ``__code__`` or wrap
``sys.stdout``. :func:`arm` runs in the grader's own cell before any student code and installs
an audit hook (:func:`sys.addaudithook`; Python code cannot remove one). The hook

* is the only writer the grader believes: each line it writes to ``audit.log`` in the run's
  private folder is signed with a key that :func:`arm` read from that folder and deleted
  before any student code ran; a line without a valid signature is not counted, and flagged;
* takes a verdict only from course_lib's own verdict code (the calling frame's code object and
  globals, by identity: ``core.verify``, ``core._verify_in_child``, ``grade.report``), for the
  exercise record registered at import, during a check the grader's ``report`` began, and
  attaches to it what differs from a snapshot taken when it was armed (after importing the
  course_lib modules that its functions import when called: the attributes of the
  guarded modules and of course_lib's classes; the code, defaults and keyword defaults of
  their functions; what the lists, dicts and sets of course_lib.exercises hold: a check's
  cases; what a function's keyword-defaults dict holds), with what changed during any call
  of the answer (``core.call``; unless the answer swaps ``sys.audit`` for that call);
* records what student code does to get around grading: swapping a function's code or
  defaults, ``gc.get_objects``/``get_referrers``, ``sys._current_frames``, ``settrace``/
  ``setprofile`` (other than course_lib's own profiler), another audit hook, ``ctypes`` used
  outside course_lib, reading the hook's own frame from a traceback, reading a frame during
  a check while answer code runs (``sys._getframe``, ``inspect.currentframe``, a traceback's
  or a generator's frame: ``f_back`` leads to the checker's locals, its expected results),
  verdicts and checks raised by other code, a process the answer starts during a check
  (``os.fork``, ``subprocess``: the forbidden-call profiler does not follow it there, so the
  verdict is not counted); and it ends the kernel (after recording it) when
  code opens, truncates, maps, renames or removes the channel, so the lines already there
  stay.

The hook never calls code a solution cell could have replaced: every name it uses at run time
was bound when it was armed (builtins too), it compares by identity, and it accepts only
exact ``str`` arguments. What it cannot see is listed in :mod:`grade`'s "Known limits".
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import dis
import gc
import importlib._bootstrap
import importlib.util
import os
import secrets
import signal
import sys
import threading
import types
from hashlib import blake2b

from . import core

KEY, LOG = "key", "audit-*.log"  # in the run's private folder (the log's name is random)
BEGIN, END = "course_lib.grade.begin", "course_lib.grade.end"  # around a grader's check
VERDICT, CHECKPOINT = core.VERDICT_EVENT, core.CHECKPOINT_EVENT
FINAL = "course_lib.grade.final"  # the grader's last cell

_ALWAYS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
           "sys.addaudithook")  # fmt: skip
#: events that name a file (argument positions): refused when it is the channel or its folder
_CHANNEL = {"open": (0,), "os.truncate": (0,), "os.remove": (0,), "os.rename": (0, 1),
            "mmap.__new__": (0,), "fcntl.fcntl": (0,), "fcntl.ioctl": (0,),
            "shutil.rmtree": (0,), "os.chmod": (0,), "os.chown": (0,)}  # fmt: skip
_KERNEL_OWNED = {f"builtins.{n}" for n in ("_", "__", "___")} | core._KERNEL_OWNED
#: events that start a process: one started by the answer during a check runs without the
#: forbidden-call profiler (it could compute the result with the library's function)
_PROCESS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec",
                      "os.system", "subprocess.Popen"})  # fmt: skip
_TIMER_SIGNALS = tuple(
    int(getattr(signal, name))
    for name in ("SIGALRM", "SIGVTALRM", "SIGPROF", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def watched_modules() -> dict:
    """``name -> module``: the guarded standard modules and every course_lib and NumPy module
    loaded (NumPy's functions look up their helpers in its submodules' globals: patching
    ``numpy._core.numeric.asanyarray`` changes what ``np.array_equal`` says)."""
    return core.guarded_modules(("course_lib", "numpy"))


def import_lazy() -> None:
    """Import what course_lib's code imports inside its functions (``check_parallel_memory``'s
    ``models.parallel``) and the modules of the names the exercises forbid, now: a module that
    first loads during a check is not in the hook's snapshot, so a solution cell could import
    it first and patch the checker's oracle unseen."""
    opcode, done, todo = dis.opmap["IMPORT_NAME"], set(), True
    while todo:  # until the modules those imports load import nothing new
        todo = [n for n in list(sys.modules) if n.split(".")[0] == "course_lib" and n not in done]
        for name in todo:
            done.add(name)
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType):
                continue
            package = getattr(module, "__package__", None) or name
            for code in core._module_codes(module).values():
                if opcode in code.co_code[::2]:  # (opcodes at even offsets; most have none)
                    _import_from(code, package)
    for record in core._RECORDS.values():
        for dotted in record.forbidden:
            with contextlib.suppress(Exception):
                core._resolve(dotted)


def _import_from(code, package: str) -> None:
    """Import the course_lib modules that ``code``'s import statements name."""
    consts: list = []
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_CONST":
            consts.append(instruction.argval)
        elif instruction.opname == "IMPORT_NAME" and len(consts) >= 2:
            level, names = consts[-2], consts[-1]
            with contextlib.suppress(Exception):  # (whatever an import raises, arming goes on)
                target = importlib.util.resolve_name("." * level + instruction.argval, package)
                if target.split(".")[0] == "course_lib":
                    for full in (target, *(f"{target}.{n}" for n in names or ())):
                        with contextlib.suppress(Exception):
                            importlib.import_module(full)


def arm(folder: str, report) -> None:  # noqa: C901, PLR0915  (one closure: the hook, its state)
    """Install the grader's audit hook for a run whose private folder is ``folder``; ``report``
    is the grader's :func:`grade.report`, the only code that may begin a check (the grader's
    import cell calls this, before any student code)."""
    key_path = os.path.join(folder, KEY)
    log_path = os.path.join(folder, LOG.replace("*", secrets.token_hex(8)))
    with open(key_path, "rb") as file:
        secret = blake2b(key=file.read().strip(), digest_size=32)
    os.remove(key_path)
    channel = [os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)]
    channel_id, folder_id = os.fstat(channel[0]), os.stat(folder)
    protected = ((channel_id.st_ino, channel_id.st_dev), (folder_id.st_ino, folder_id.st_dev))

    import_lazy()
    modules = watched_modules()
    entries = [
        (vars(module), key, value, f"{name}.{key}")
        for name, module in modules.items()
        for key, value in list(vars(module).items())
        if f"{name}.{key}" not in _KERNEL_OWNED
    ]
    attributes, functions = core.collect(modules, _KERNEL_OWNED)
    entries += attributes
    watched_functions = {id(f[0]) for f in functions}
    empty, value_error = object(), ValueError

    def contents(cell):
        """A closure cell's value (``empty`` for an empty cell)."""
        try:
            return cell.cell_contents
        except value_error:
            return empty

    closures = [  # a function's closure cells: setting cell_contents raises no audit event
        (cell, contents(cell), label + ".__closure__")
        for fn, _, _, _, label in functions
        for cell in fn.__closure__ or ()
    ]
    quick = "course_lib.exercises"  # what a call of the answer is checked for (cheap)
    quick_entries = [e for e in entries if e[3].startswith(quick)]
    quick_functions = [f for f in functions if f[4].startswith(quick)]
    library = {  # id -> code object of course_lib (nested ones too): kept alive, by identity
        id(code): code
        for f in functions if f[4].startswith("course_lib")
        for code in core._nested(f[1])
    }  # fmt: skip
    emitters = {
        id(core.verify.__code__): vars(core),
        id(core._verify_in_child.__code__): vars(core),
        id(report.__code__): report.__globals__,
    }
    report_code, grade_space = report.__code__, report.__globals__
    importing = importlib._bootstrap._call_with_frames_removed.__code__
    package, installed = core._PACKAGE, (*core._INSTALLED, "<frozen ")
    ctypes_package = core.folders(os.path.dirname(ctypes.__file__))
    quiet = {  # code allowed to do what is otherwise recorded
        id(core._restore.__code__),  # puts swapped code back in a check's child process
        id(core._refusing.__wrapped__.__code__),  # the forbidden-call profiler
        id(threading.Thread._bootstrap_inner.__code__),  # a thread takes that profiler
    }
    records = {
        key: (r, r.checker, r.mistakes, r.forbidden, r.function, r.time_limit, r.points)
        for key, r in core._RECORDS.items()
    }
    handlers = [(s, signal.getsignal(s)) for s in _TIMER_SIGNALS]
    gettrace, getprofile = sys.gettrace, sys.getprofile
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    streams = (sys.stdout, sys.stderr)
    state = {"window": None, "tainted": set()}
    busy: set = set()
    own_codes: set = set()
    # Everything the hook calls, bound now: a solution cell may rebind any name later.
    get_ident, getframe, getpid, fstat, stat, write = (
        _thread.get_ident, sys._getframe, os.getpid, os.fstat, os.stat, os.write)  # fmt: skip
    exit_now, open_fd, getsignal, sys_module, sys_modules = (
        os._exit, os.open, signal.getsignal, sys, sys.modules)  # fmt: skip
    str_, int_, bytes_, tuple_, startswith = str, int, bytes, tuple, str.startswith
    kind_of, repr_of, len_of, sorted_of, id_of, set_of = type, repr, len, sorted, id, set
    traceback_type, base_error, missing = types.TracebackType, BaseException, object()
    watched = frozenset({BEGIN, END, VERDICT, CHECKPOINT, FINAL, "object.__setattr__",
                         "object.__delattr__", "object.__getattr__", "sys.settrace",
                         "sys.setprofile", "sys._getframe", *_ALWAYS, *_CHANNEL,
                         *_PROCESS})  # fmt: skip
    frame_attributes = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
    always, channel_events, processes = frozenset(_ALWAYS), dict(_CHANNEL), _PROCESS
    special = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
    exercise_ids, flags = frozenset(records), os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
    begin, end, verdict, checkpoint, final = BEGIN, END, VERDICT, CHECKPOINT, FINAL
    module_items = list(modules.items())
    dict_, range_of = dict, range

    def items(table) -> tuple:
        """The objects a list, set or dict holds (a dict's keys and values), in order: compared
        by identity, so no code of theirs runs."""
        if kind_of(table) is dict_:
            return tuple_(x for pair in table.items() for x in pair)
        return tuple_(table)

    caches = {f"{core.__name__}.{n}" for n in ("_ORIGINS", "_FORBIDDEN_CACHE", "_HANDED")}
    tables = [  # the checks' cases and tables: a list cleared in place keeps its binding
        (value, items(value), label)
        for _, key, value, label in quick_entries
        if type(value) in (list, dict, set) and not key.startswith("__") and label not in caches
    ] + [  # keyword defaults, a dict: call.__kwdefaults__["own"] = True skips exact()
        (f[3], items(f[3]), f[4] + ".__kwdefaults__") for f in functions if type(f[3]) is dict
    ]

    def send(*fields) -> None:
        """Write one signed line, ``MAC repr((pid, *fields))``; reopen the channel first if
        its descriptor no longer points at it (os.dup2 or os.close by a solution cell)."""
        try:
            now = fstat(channel[0])
            same = (now.st_ino, now.st_dev) == protected[0]
        except base_error:
            same = False
        if not same:
            channel[0] = open_fd(log_path, flags)
            fields = ("event", "the grader's channel was redirected", repr_of(fields))
        payload = repr_of((getpid(), *fields))
        mac = secret.copy()
        mac.update(payload.encode("utf-8", "backslashreplace"))
        write(channel[0], f"{mac.hexdigest()} {payload}\n".encode("utf-8", "backslashreplace"))

    def is_protected(target, folder_too: bool) -> bool:
        """Is ``target`` (a path or a descriptor) the channel, or with ``folder_too`` its
        folder (the kernel's working directory: reading it is allowed, moving it is not)?"""
        try:
            kind = kind_of(target)
            if kind is int_:
                found = fstat(target)
            elif kind is str_ or kind is bytes_:
                found = stat(target)
            else:
                return False
        except base_error:
            return False
        key = (found.st_ino, found.st_dev)
        return key == protected[0] or (folder_too and key == protected[1])

    def changed(entries, functions, modules_now) -> list:
        found = []
        for space, key, value, label in entries:
            if space.get(key, missing) is not value:
                found.append(label)
        for fn, code, defaults, kwdefaults, label in functions:
            if (
                fn.__code__ is not code
                or fn.__defaults__ is not defaults
                or fn.__kwdefaults__ is not kwdefaults
            ):
                found.append(label + ".__code__")
        for name, module in modules_now:
            if sys_modules.get(name) is not module:
                found.append("sys.modules[" + repr_of(name) + "]")
        return found

    def closures_changed() -> list:
        return [label for cell, value, label in closures if contents(cell) is not value]

    def tables_changed() -> list:
        found = []
        for table, before, label in tables:
            now = items(table)
            same = len_of(now) == len_of(before)
            for k in range_of(len_of(now) if same else 0):
                same = same and now[k] is before[k]
            if not same:
                found.append(label + " (its contents)")
        return found

    def everything_changed() -> list:
        found = changed(entries, functions, module_items) + closures_changed() + tables_changed()
        for number, handler in handlers:
            if getsignal(number) is not handler:
                found.append("signal handler " + repr_of(number))
        return found

    def library_near(frame) -> bool:
        """Whether the code that called into ctypes is a library's: course_lib (by identity,
        or by file name for modules imported after arming), an import, the standard library
        or an installed package (threadpoolctl, multiprocessing.Value, NumPy's and CUDA's
        loaders), not a solution cell. A file name that is not an exact ``str`` (a code
        object can be given any) is not a library's."""
        while frame is not None:
            code = frame.f_code
            name = code.co_filename
            if kind_of(name) is not str_:
                return False
            if not startswith(name, ctypes_package):  # the caller of ctypes
                return (code is importing or id_of(code) in library
                        or startswith(name, package) or startswith(name, installed))  # fmt: skip
            frame = frame.f_back
        return False

    def answer_below(frame) -> bool:
        """Whether a check is under way and code that is not a library's (the answer) runs
        between ``frame`` and the grader's ``report``: from a frame there, ``f_back`` reaches
        the checker's frames, and their locals hold the expected results."""
        if state["window"] is None:
            return False
        answer = False
        while frame is not None:
            code = frame.f_code
            if code is report_code and frame.f_globals is grade_space:
                return answer
            name = code.co_filename
            answer = answer or not (
                code is importing or id_of(code) in library or (kind_of(name) is str_ and (
                    startswith(name, package) or startswith(name, installed))))  # fmt: skip
            frame = frame.f_back
        return False

    def started_by_answer(frame) -> bool:
        """Whether a check is under way and the nearest code outside the standard library and
        installed packages that led to ``frame`` is the answer's, not course_lib's."""
        if state["window"] is None:
            return False
        while frame is not None:
            code = frame.f_code
            name = code.co_filename
            if code is report_code or code is importing or id_of(code) in library:
                return False
            if kind_of(name) is not str_:
                return True
            if not startswith(name, installed):
                return not startswith(name, package)  # (modules imported after arming)
            frame = frame.f_back
        return False

    def where(frame) -> str:
        name = frame.f_code.co_filename
        return (name if kind_of(name) is str_ else "<a renamed file>") + ":" + repr_of(
            frame.f_lineno
        )

    def on_verdict(frame, args) -> None:
        genuine = emitters.get(id_of(frame.f_code))
        if genuine is None or frame.f_globals is not genuine:
            send("event", "a verdict from code that is not the grader's", "")
            return
        if kind_of(args) is not tuple_ or len_of(args) != 5:
            send("event", "a verdict in the wrong form", "")
            return
        exercise_id, found, status, message, mistake = args
        if (
            kind_of(exercise_id) is not str_
            or exercise_id not in exercise_ids
            or kind_of(status) is not str_
            or kind_of(message) is not str_
            or (kind_of(mistake) is not str_ and mistake is not None)
        ):
            send("event", "a verdict in the wrong form", "")
            return
        record = records[exercise_id]
        if found is None:
            if status != "missing":
                send("event", "a verdict without its exercise record", exercise_id)
                return
        elif (
            found is not record[0]
            or found.checker is not record[1]
            or found.mistakes is not record[2]
            or found.forbidden is not record[3]
            or found.function is not record[4]
            or found.time_limit is not record[5]
            or found.points is not record[6]
        ):
            send("event", "a verdict for a changed exercise record", exercise_id)
            return
        patched = sorted_of(set_of(everything_changed()) | state["tainted"])[:20]
        send("verdict", state["window"], exercise_id, status, message, mistake, tuple_(patched))

    def hook(event, args) -> None:  # noqa: C901, PLR0912
        if kind_of(event) is not str_:
            return
        if event not in watched:
            if not event.startswith("ctypes."):
                return
        elif event == "object.__getattr__" and (
            kind_of(args) is not tuple_
            or len_of(args) != 2
            or kind_of(args[1]) is not str_
            or args[1] not in frame_attributes
        ):
            return  # the frequent case: __code__ and the like, read by libraries
        me = get_ident()
        if me in busy:
            return  # the hook's own doings
        busy.add(me)
        collecting = gc_enabled()
        gc_disable()  # no gc.callbacks (student code) run inside the hook
        try:
            frame = getframe(1)  # the code that raised the event
            if event == verdict:
                on_verdict(frame, args)
            elif event == begin or event == end:
                if frame.f_code is report_code and frame.f_globals is grade_space:
                    state["window"] = args[0] if event == begin else None
                    if event == begin and (gettrace() is not None or getprofile() is not None):
                        send("event", "a tracer or profiler on during a check", "")
                else:
                    send("event", "a grader's check begun by code that is not the grader's", "")
            elif event == checkpoint:
                state["tainted"].update(changed(quick_entries, quick_functions, ()))
                state["tainted"].update(tables_changed())
            elif event == final:
                found = everything_changed()
                if sys_module.stdout is not streams[0] or sys_module.stderr is not streams[1]:
                    found.append("sys.stdout/sys.stderr")  # (a check's child replaces them)
                send("final", tuple_(found[:20]))
            elif event in always:
                send("event", event, where(frame))
            elif event in channel_events:
                for position in channel_events[event]:
                    if position < len_of(args) and is_protected(args[position], event != "open"):
                        send("event", event + " of the grader's channel", where(frame))
                        exit_now(70)
            elif event in processes:
                if started_by_answer(frame):
                    state["tainted"].add("a process started by the answer (" + event + ")")
                    send("event", "a process started by the answer during a check",
                         event + " at " + where(frame))  # fmt: skip
            elif event == "sys.settrace" or event == "sys.setprofile":
                # a profiler of a student's cell (%prun) is harmless; one set during a
                # check (or left on into one: begin says so) is recorded
                if state["window"] is not None and id_of(frame.f_code) not in quiet:
                    send("event", event, where(frame))
            elif event == "object.__getattr__" and args[1] == "tb_frame" and (
                    kind_of(args[0]) is traceback_type
                    and id_of(args[0].tb_frame.f_code) in own_codes):  # fmt: skip
                send("event", "read the grader's audit hook's frame", "")
            elif event == "object.__getattr__" or event == "sys._getframe":
                if answer_below(frame):
                    send("event", "read a frame during a check", where(frame))
            elif event.startswith("ctypes."):
                if not library_near(frame):
                    send("event", event, where(frame))
            elif (
                kind_of(args) is tuple_
                and len_of(args) >= 2
                and kind_of(args[1]) is str_
                and args[1] in special
                and id_of(frame.f_code) not in quiet
                and (args[1] == "__code__" or id_of(args[0]) in watched_functions)
            ):  # object.__setattr__ / __delattr__ of a function's code (or of the defaults
                # of a function of the guarded modules: namedtuple sets its __new__'s)
                send("event", "set " + args[1] + " of a function", where(frame))
        except base_error:  # noqa: BLE001, S110  (the hook never raises into the caller)
            pass
        finally:
            if collecting:
                gc_enable()
            busy.discard(me)

    own_codes.update(id(f.__code__) for f in (hook, send, on_verdict, changed, is_protected,
                                             everything_changed, library_near, where,
                                             answer_below, started_by_answer,
                                             closures_changed, contents, tables_changed,
                                             items))  # fmt: skip
    sys.addaudithook(hook)
    send("armed", tuple(sorted(exercise_ids)))
