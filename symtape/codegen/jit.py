"""JIT: LLVM IR text -> optimised object code (cached on disk) -> an engine that runs it.

llvmlite >= 0.45 only: the new pass builder at O3 (O2 for large modules) with loop and SLP
vectorisation, opaque pointers, a target machine for the host CPU name and features, and no
``llvm.initialize()`` (removed). Object code is cached by :mod:`~symtape.codegen.cache` under a
key covering everything that changes the machine code; a cache hit parses, optimises and
generates nothing: the object file goes straight into an MCJIT engine, which only relocates it.
Object code read back from disk is first checked by :func:`check_object` (on ELF hosts: the
header, the section table, symbols and relocations stay inside the blob and fit this machine),
so a damaged entry is recompiled instead of crashing the loader.

LLVM's global context is not thread-safe, so every call into LLVM here holds one lock.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import os
import struct
import sys
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

from symtape.base import progress
from symtape.base.errors import CompileError
from symtape.codegen import cache, pieces
from symtape.codegen.lanes import LANES_MARK

__all__ = ["STATS", "Host", "host", "features", "compile_object", "object_code", "assembly",
           "check_object", "Engine"]

_LOCK = threading.RLock()
#: The pass pipeline's level, with loop and SLP vectorisation, interleaving and unrolling
#: on, for modules of fewer than :data:`O3_FUNCTIONS` functions; larger ones get O2: the
#: seed CNN's training step (354 functions) compiled in 2.4 s against 3.3 s at O3, at the
#: same speed (as were the MLP training step and the peers' 15 problems; a 2-core Xeon),
#: where a small lane kernel of ``sin`` and ``exp`` ran 3-5% faster after O3.
_OPT_LEVEL = 3
O3_FUNCTIONS = 64
#: The code generator's level (instruction selection, scheduling, register allocation).
_CODEGEN_LEVEL = 3
_PIPELINE = (f"O{_OPT_LEVEL}, O2 from {O3_FUNCTIONS} functions"
             "+loop-vectorize+slp-vectorize+unroll; "
             "lanes: always-inline+instcombine+simplifycfg")
# A large kernel in lane mode (it carries ``lanes.LANES_MARK``) is straight-line vector code that
# was simplified and shared when it was planned, and O3 finds nothing more in it (measured:
# the same speed, for 0.5 s less on a 19,000-op MLP gradient and 2 s on a 30,000-op
# Hessian), so it gets only the inliner and a clean-up.


class Stats:
    """Counters of JIT work in this process (tests read them to see what a call cost).

    ``compiles``: IR optimised and turned into object code; ``cache_hits``/``cache_misses``:
    disk cache look-ups; ``engines``: object files loaded into an engine; ``asm``: assembly
    listings made for ``.asm``.
    """

    _names = ("compiles", "cache_hits", "cache_misses", "engines", "asm")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        for name in self._names:
            setattr(self, name, 0)

    def bump(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def snapshot(self) -> dict:
        """The counters as a dict.

        >>> sorted(STATS.snapshot())
        ['asm', 'cache_hits', 'cache_misses', 'compiles', 'engines']
        """
        return {name: getattr(self, name) for name in self._names}


STATS = Stats()


@functools.cache
def _llvm():
    """llvmlite's binding layer with the native target ready.

    It is imported with this module, not on first use: its ~25-40 ms belong to
    ``import symtape``, so that a compile answered by the disk cache costs milliseconds."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


@dataclass(frozen=True)
class Host:
    """What the machine code depends on: triple, CPU name and features, LLVM versions."""

    triple: str
    cpu: str
    features: str
    llvmlite: str
    llvm: str

    def signature(self) -> tuple:
        """The fields that decide whether object code made elsewhere runs here."""
        return (self.triple, self.cpu, self.features, self.llvmlite, self.llvm)


@functools.cache
def host() -> Host:
    """The host description (computed once per process).

    >>> host().cpu == _llvm().get_host_cpu_name()
    True
    """
    import llvmlite

    llvm = _llvm()
    return Host(
        triple=llvm.get_process_triple(),
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        llvmlite=llvmlite.__version__,
        llvm=".".join(map(str, llvm.llvm_version_info)),
    )


#: Tuning features added to the host's on x86-64: vector gathers and scatters are never
#: chosen by the loop vectoriser. With AVX-512 LLVM takes them as cheap, but they are slow on
#: AMD's cores and, since the microcode against Downfall, on Intel's: the Rosenbrock n=10
#: value kernel (a point reads a row of 10) ran 28 ns a point with four-wide gathers, 7.5 ns
#: with them replaced by loads and shuffles (hand C: 10 ns).
X86_TUNING = "+prefer-no-gather,+prefer-no-scatter"


def features() -> str:
    """The feature string code is generated for: the host's, plus :data:`X86_TUNING` on
    x86-64.

    >>> host().features in features()
    True
    """
    h = host()
    if h.triple.startswith(("x86_64", "amd64")):
        return f"{h.features},{X86_TUNING}" if h.features else X86_TUNING
    return h.features


def _target_machine():
    """A fresh target machine for the host CPU (an MCJIT engine takes ownership of one)."""
    llvm = _llvm()
    h = host()
    target = llvm.Target.from_triple(h.triple)
    return target.create_target_machine(
        cpu=h.cpu, features=features(), opt=_CODEGEN_LEVEL, reloc="default", codemodel="jitdefault"
    )


@functools.cache
def _codegen_machine():
    """The target machine used for optimising and emitting code (under the lock).

    No LLVM command-line option is set: those are global to the process, and would change
    the code of every other llvmlite user in it (numba). Large kernels are cut into
    functions of a few hundred operations (``kernel.SPLIT_OPS``), which keeps LLVM's
    instruction schedulers, quadratic in a basic block's size, to about a tenth of its time
    (measured over the 15 kernels of ``benchmarks/peers.py``: 6.1-6.6 s of LLVM with the
    schedulers off, 7.0 s with them on)."""
    return _target_machine()


def _optimised(ir: str, tm=None, context=None, whole: str | None = None):
    """Parses, verifies and optimises ``ir`` (in ``context``, for ``tm``: by default LLVM's
    global context and :func:`_codegen_machine`); the pipeline is chosen by the module
    ``whole`` that ``ir`` is a piece of (by default ``ir``). Call with the lock held, unless
    ``context`` is this thread's own (the passes then run outside llvmlite's lock too)."""
    llvm = _llvm()
    tm = tm if tm is not None else _codegen_machine()
    whole = ir if whole is None else whole
    try:
        mod = llvm.parse_assembly(ir, context)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as exc:
        raise CompileError(f"LLVM rejected the generated IR: {exc}") from None
    if LANES_MARK in whole[:1000]:
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
        pm = llvm.create_new_module_pass_manager()
        pm.add_always_inliner_pass()
        pm.add_instruction_combine_pass()
        pm.add_simplify_cfg_pass()
        _run_passes(pm, mod, pb, context is not None)
        return mod
    level = _OPT_LEVEL if whole.count("\ndefine ") < O3_FUNCTIONS else min(_OPT_LEVEL, 2)
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_interleaving = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    _run_passes(pb.getModulePassManager(), mod, pb, context is not None)
    return mod


def _run_passes(pm, mod, pb, own_context: bool = False) -> None:
    """Runs the module pass manager ``pm`` over ``mod``, then frees it with its passes and
    their state. llvmlite's pass managers never free themselves (``ObjectRef._dispose``, a
    no-op, comes before ``NewPassManager._dispose`` in their MRO): left to the garbage
    collector, every compile kept ~100 kB of native memory for the life of the process.
    ``own_context``: ``mod`` lives in a context of its own, and the passes run outside
    llvmlite's lock (see :func:`_compile_pieces`)."""
    run = _unlocked("LLVMPY_RunNewModulePassManager") if own_context else None
    try:
        if run is not None:
            run(pm, mod, pb)
        else:
            pm.run(mod, pb)
    finally:
        if not pm.closed:
            llvm.newpassmanagers.NewPassManager._dispose(pm)
            pm.detach()  # (freed: a later close() must not free it again)


def compile_object(ir: str) -> bytes:
    """Optimised object code for ``ir`` (no cache): one object file, or for a large module
    several packed into one blob (see :mod:`~symtape.codegen.pieces`)."""
    chars = pieces.PIECE_CHARS
    parts = pieces.split(ir, chars) if len(ir) >= chars else [ir]
    if len(parts) > 1:
        obj = pieces.pack(_compile_pieces(parts, ir))
    else:
        with _LOCK:
            mod = _optimised(ir)
            obj = bytes(_codegen_machine().emit_object(mod))
    STATS.bump("compiles")
    return obj


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _compile_pieces(parts: list[str], whole: str) -> list[bytes]:
    """The object code of each module of ``parts`` (pieces of ``whole``), compiled side by
    side on up to one thread a core: each piece is parsed and optimised in its own LLVM
    context under the lock, and its code generated outside it (llvmlite takes one lock for
    every call into LLVM; code generation for separate contexts and target machines is
    what LLVM's own parallel back ends do)."""
    emit = _unlocked("LLVMPY_TargetMachineEmitToMemory")

    def one(text: str) -> bytes:
        with _LOCK:
            context = _llvm().create_context()
            tm = _target_machine()
        mod = None
        try:
            mod = _optimised(text, tm, context, whole)
            if emit is None:  # (a binding layer without the unlocked entry points)
                return bytes(tm.emit_object(mod))
            return _emit_unlocked(emit, tm, mod)
        finally:
            with _LOCK:
                if mod is not None:
                    mod.close()
                context.close()

    workers = min(len(parts), _cpus())
    if workers < 2:
        return [one(text) for text in parts]
    with concurrent.futures.ThreadPoolExecutor(workers, "symtape-llvm") as pool:
        return list(pool.map(one, parts))


def _unlocked(name: str):
    """llvmlite's C entry point ``name`` without the lock its binding layer takes around
    every call (None where the binding layer is not built that way)."""
    return getattr(getattr(llvm.ffi.lib, name, None), "_cfn", None)


def _emit_unlocked(emit, tm, mod) -> bytes:
    """Object code of ``mod`` from LLVM's emitter ``emit`` called without llvmlite's lock
    (``mod`` lives in a context of its own)."""
    ffi = llvm.ffi
    with ffi.OutputString() as err:
        buf = emit(tm, mod, 1, err)
        if not buf:
            raise CompileError(f"LLVM could not generate code: {err}")
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buf),
                                ffi.lib.LLVMPY_GetBufferSize(buf))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


def assembly(ir: str) -> str:
    """The optimised assembly listing of ``ir``."""
    with _LOCK:
        mod = _optimised(ir)
        asm = _codegen_machine().emit_assembly(mod)
    STATS.bump("asm")
    return asm


def cache_key(ir: str) -> str:
    """The cache key of ``ir`` on this host (IR, CPU, features, versions, pipeline)."""
    return cache.key(ir, _PIPELINE, features(), *host().signature())


def object_code(ir: str) -> bytes:
    """Object code for ``ir``: from the disk cache, else compiled and stored there.

    >>> ir = "define i64 @seven() { ret i64 7 }"
    >>> obj = object_code(ir)
    >>> before = STATS.compiles
    >>> object_code(ir) == obj and STATS.compiles == before  # the second time, a cache hit
    True
    >>> Engine(obj).function("seven", ctypes.c_int64)()
    7
    """
    digest = cache_key(ir)
    obj = cache.read(digest)
    if obj is not None and check_object(obj) is None:
        STATS.bump("cache_hits")
        return obj
    STATS.bump("cache_misses")
    progress.stage("native code (LLVM: optimising, emitting)")
    obj = compile_object(ir)
    cache.write(digest, obj)
    return obj


# --------------------------------------------------------------------------------------------
# Checking object code read from disk
# --------------------------------------------------------------------------------------------

# ELF e_machine by the architecture of an LLVM triple
_ELF_MACHINES = {
    "x86_64": 62, "amd64": 62, "i386": 3, "i486": 3, "i586": 3, "i686": 3, "aarch64": 183,
    "arm64": 183, "powerpc64le": 21, "ppc64le": 21, "powerpc64": 21, "ppc64": 21,
    "s390x": 22, "riscv64": 243, "loongarch64": 258,
}
_ET_REL = 1
_SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 2, 3, 4, 8, 9
_SHT_SYMTAB_SHNDX = 18
_SHN_LORESERVE, _SHN_XINDEX = 0xFF00, 0xFFFF
_MAX_SECTIONS = 1 << 14
_MAX_ENTRIES = 1 << 22


@dataclass(frozen=True)
class _ElfLayout:
    """The ELF flavour of this host and the record formats that go with it."""

    cls: int  # 1: 32-bit, 2: 64-bit
    data: int  # 1: little-endian, 2: big-endian
    machine: int | None  # None: unknown architecture, learnt from LLVM's own output

    @property
    def order(self) -> str:
        return "<" if self.data == 1 else ">"

    @property
    def wide(self) -> bool:
        return self.cls == 2


def _object_format(triple: str) -> str:
    if any(os_name in triple for os_name in ("darwin", "macos", "ios")):
        return "macho"
    if any(os_name in triple for os_name in ("windows", "win32", "mingw", "msvc", "cygwin")):
        return "coff"
    return "elf"


@functools.cache
def _elf_layout() -> _ElfLayout:
    arch = host().triple.split("-")[0]
    machine = _ELF_MACHINES.get(arch)
    if machine is None and arch.startswith(("arm", "thumb")):
        machine = 40
    cls = 2 if sys.maxsize > 2**32 else 1
    data = 1 if sys.byteorder == "little" else 2
    if machine is None:  # an architecture this table does not know: ask LLVM once
        with _LOCK:
            probe = bytes(_codegen_machine().emit_object(_llvm().parse_assembly("")))
        if probe[:4] == b"\x7fELF" and len(probe) >= 20:
            cls, data = probe[4], probe[5]
            machine = struct.unpack_from("<H" if data == 1 else ">H", probe, 18)[0]
    return _ElfLayout(cls, data, machine)


def check_object(obj: bytes) -> str | None:
    """Why ``obj`` is not object code for this host, or None when it passes.

    On ELF hosts this checks the header (magic, class, byte order, relocatable type and
    e_machine of this host), the section header table and every section's file range, and the
    symbol and relocation tables (entry sizes, string offsets, symbol and section indices,
    relocation offsets inside their sections), all within the blob and with sane counts. It
    guards the loader against damaged files; it is not a proof that the code is benign, which
    is what the cache's MAC is for.

    >>> check_object(compile_object("define i64 @one() { ret i64 1 }")) is None
    True
    >>> check_object(b"garbage") is not None
    True
    """
    if not isinstance(obj, bytes) or not obj:
        return "no object code"
    if obj.startswith(pieces.PACK_MAGIC):
        parts = pieces.unpack(obj)
        if parts is None:
            return "the table of a packed object is damaged"
        for part in parts:
            if part.startswith(pieces.PACK_MAGIC):
                return "a packed object holds another"
            problem = check_object(part)
            if problem is not None:
                return problem
        return None
    fmt = _object_format(host().triple)
    if fmt == "macho":
        return None if obj[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe") else \
            "no Mach-O magic"
    if fmt == "coff":
        return None if len(obj) >= 20 else "shorter than a COFF header"
    try:
        return _elf_problem(obj, _elf_layout())
    except struct.error:
        return "a table runs past the end of the object code"


def _elf_problem(obj: bytes, want: _ElfLayout) -> str | None:
    if len(obj) < 16 or obj[:4] != b"\x7fELF":
        return "no ELF magic"
    if obj[4] != want.cls or obj[5] != want.data or obj[6] != 1:
        return (f"ELF class/byte order/version {obj[4]}/{obj[5]}/{obj[6]} do not match this "
                f"host ({want.cls}/{want.data}/1)")
    o = want.order
    ehdr = struct.Struct(o + ("HHIQQQIHHHHHH" if want.wide else "HHIIIIIHHHHHH"))
    shdr = struct.Struct(o + ("IIQQQQIIQQ" if want.wide else "IIIIIIIIII"))
    (e_type, e_machine, e_version, _, e_phoff, e_shoff, _, e_ehsize, e_phentsize, e_phnum,
     e_shentsize, e_shnum, e_shstrndx) = ehdr.unpack_from(obj, 16)
    if e_type != _ET_REL or e_version != 1:
        return f"ELF type {e_type} version {e_version}: not a relocatable object"
    if want.machine is not None and e_machine != want.machine:
        return f"ELF machine {e_machine} is not this host's ({want.machine})"
    if e_ehsize != 16 + ehdr.size or e_shentsize != shdr.size:
        return "ELF header or section header size is wrong"
    if not 0 < e_shnum <= _MAX_SECTIONS or e_shstrndx >= e_shnum:
        return f"ELF section count {e_shnum} or name table index {e_shstrndx} is not sane"
    if e_phnum and (e_phoff + e_phnum * e_phentsize > len(obj)):
        return "the ELF program header table is outside the object code"
    if e_shoff < e_ehsize or e_shoff + e_shnum * e_shentsize > len(obj):
        return "the ELF section header table is outside the object code"
    sections = [shdr.unpack_from(obj, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    for i, (_, sh_type, _, _, off, size, link, _, align, _) in enumerate(sections):
        if sh_type not in (0, _SHT_NOBITS) and off + size > len(obj):
            return f"ELF section {i} lies outside the object code"
        if link >= e_shnum or (align & (align - 1)):
            return f"ELF section {i} has a bad link or alignment"
        if sh_type == _SHT_SYMTAB_SHNDX:
            return f"ELF section {i}: extended section indices are not expected here"
    names = sections[e_shstrndx] if e_shstrndx else None
    if names is not None and names[1] != _SHT_STRTAB:
        return "the ELF section name table is not a string table"
    for i, sec in enumerate(sections):
        if names is not None and sec[0] >= names[5]:
            return f"ELF section {i} has a name outside the name table"
        problem = _table_problem(obj, want, sections, i)
        if problem:
            return problem
    return None


def _table_problem(obj: bytes, want: _ElfLayout, sections: list, i: int) -> str | None:
    """Symbol and relocation tables: whole entries, indices and offsets in range."""
    _, sh_type, _, _, off, size, link, info, _, entsize = sections[i]
    if sh_type == _SHT_SYMTAB:
        expected = 24 if want.wide else 16
        if entsize != expected or size % expected or size // expected > _MAX_ENTRIES:
            return f"ELF symbol table {i} has bad entries"
        strtab = sections[link]
        if strtab[1] != _SHT_STRTAB:
            return f"ELF symbol table {i} is not linked to a string table"
        fmt = want.order + ("IBBHQQ" if want.wide else "IIIBBH")
        for k in range(size // expected):
            fields = struct.unpack_from(fmt, obj, off + k * expected)
            name, shndx = fields[0], (fields[3] if want.wide else fields[5])
            if name >= max(strtab[5], 1):
                return f"ELF symbol {k} has a name outside its string table"
            if shndx >= len(sections) and (shndx < _SHN_LORESERVE or shndx == _SHN_XINDEX):
                return f"ELF symbol {k} refers to a missing section"
    elif sh_type in (_SHT_RELA, _SHT_REL):
        expected = (24 if sh_type == _SHT_RELA else 16) if want.wide else (
            12 if sh_type == _SHT_RELA else 8)
        if entsize != expected or size % expected or size // expected > _MAX_ENTRIES:
            return f"ELF relocation table {i} has bad entries"
        symtab, target = sections[link], sections[info] if info < len(sections) else None
        if symtab[1] != _SHT_SYMTAB or target is None:
            return f"ELF relocation table {i} has a bad symbol table or target section"
        n_symbols = symtab[5] // max(symtab[9], 1)
        fmt = want.order + ("QQ" if want.wide else "II")
        for k in range(size // expected):
            r_offset, r_info = struct.unpack_from(fmt, obj, off + k * expected)
            sym = r_info >> 32 if want.wide else r_info >> 8
            if sym >= n_symbols or r_offset >= target[5]:
                return f"ELF relocation {k} of table {i} points outside its symbols or section"
    return None


class Engine:
    """An MCJIT engine holding the object files of ``obj`` (one, or several packed by
    :func:`~symtape.codegen.pieces.pack`, linked together); the code lives as long as this
    object."""

    def __init__(self, obj: bytes) -> None:
        llvm = _llvm()
        parts = pieces.unpack(bytes(obj))
        if parts is None:
            raise CompileError("could not load object code: the table of a packed object is "
                               "damaged")
        with _LOCK:
            try:
                ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
                for part in parts:
                    ee.add_object_file(llvm.ObjectFileRef.from_data(part))
                ee.finalize_object()
            except RuntimeError as exc:
                raise CompileError(f"could not load object code: {exc}") from None
        self._ee = ee
        STATS.bump("engines")

    def function(self, symbol: str, restype, *argtypes):
        """The exported ``symbol`` as a ctypes function (which releases the GIL); it keeps
        this engine alive."""
        with _LOCK:
            addr = self._ee.get_function_address(symbol)
        if not addr:
            raise CompileError(f"symbol {symbol!r} is missing from the object code")
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(addr)
        fn.engine = self  # the code must live as long as any handle to it
        return fn

    def close(self) -> None:
        """Frees the code; functions taken from this engine must not be called after."""
        ee, self._ee = getattr(self, "_ee", None), None
        if ee is not None:
            with _LOCK:
                ee.close()

    def __del__(self) -> None:
        # at interpreter shutdown LLVM may already be gone: nothing is left to free then
        with contextlib.suppress(Exception):
            self.close()
