"""The native SIGBUS handler of ``tokenloom.format.sigbus``: the memory it reads, and
its code, compiled at run time by LLVM (llvmlite, numba's compiler backend).

The handler runs inside a signal handler, so it allocates nothing, takes no lock,
touches no Python object and raises nothing: it reads raw memory (the *root* words,
whose address is a constant of the code, and the table rows they point to) and calls
three async-signal-safe C functions (``write``, ``sigaction``, ``raise``) through the
addresses the root holds. It is built with ``llvmlite.ir`` (two small functions, below)
and compiled once per process (milliseconds; no numba import, no on-disk cache: the
code holds this process's addresses). A forked child inherits it with the memory.

``void tokenloom_sigbus_handler(int signum, siginfo_t *info, void *context)``:

1. a second run (the fault came back through another handler that re-raised, or two
   threads faulted): restore the action found at the first install, re-raise;
2. a fault (``si_code > 0``) at an address (``si_addr``) inside a recorded row's range:
   write ``HEADER``, the row's text and ``SUFFIX`` to fd 2;
3. restore the action it displaced; for a fault, return (the instruction faults again,
   into that handler), else (``kill``, ``raise``) re-raise the signal.

Its readable twin is ``SigbusReporter.describe`` (the text for an address), which the
tests compare with what a dying process wrote. ``siginfo_t``'s layout (``si_code`` at
byte 8, ``si_addr`` at byte 16) is that of 64-bit Linux (``format.sigaction.supported``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ROOT_WORDS", "compile_handler"]

# the root words (int64): the handler's whole view of the world
(
    FIRED,  # set by the handler's first run: a second one restores ORIGINAL and re-raises
    HIGH,  # rows below this index may be in use
    CAPACITY,  # rows of the table
    ROWS,  # address of the table: CAPACITY rows of ROW_BYTES bytes
    HEADER,  # address and length of the text written before a row's text
    HEADER_LENGTH,
    SUFFIX,  # address and length of the text written after it
    SUFFIX_LENGTH,
    PREVIOUS,  # address of the struct sigaction the handler restores
    ORIGINAL,  # address of the struct sigaction found at the first install
    WRITE,  # addresses of the C library's write, sigaction and raise
    SIGACTION,
    RAISE,
) = range(13)
ROOT_WORDS = 16
# a row: three int64 (START, END: the mapped range, in use while END > START; LENGTH of
# its text), then its text (the path, its tail when longer, and the size at open)
START, END, LENGTH = range(3)
ROW_BYTES = 512
TEXT_OFFSET = 24
TEXT_BYTES = ROW_BYTES - TEXT_OFFSET
HANDLER_NAME = "tokenloom_sigbus_handler"


class _Code:
    """Helpers to emit the handler's IR with one builder."""

    def __init__(self, ir: Any, builder: Any, root_address: int) -> None:
        self.ir, self.b = ir, builder
        self.i32, self.i64 = ir.IntType(32), ir.IntType(64)
        self.ptr = ir.IntType(8).as_pointer()
        self.root = root_address

    def const(self, value: int) -> Any:
        return self.ir.Constant(self.i64, value)

    def load64(self, address: Any) -> Any:
        """The int64 at ``address`` (an i64 value)."""
        return self.b.load(self.b.inttoptr(address, self.i64.as_pointer()))

    def word(self, index: int) -> Any:
        return self.load64(self.const(self.root + 8 * index))

    def call(self, word: int, result: Any, arguments: list[Any]) -> Any:
        """Call the C function whose address is root word ``word``."""
        kind = self.ir.FunctionType(result, [a.type for a in arguments])
        function = self.b.inttoptr(self.word(word), kind.as_pointer())
        return self.b.call(function, arguments)

    def write(self, address: Any, length: Any) -> None:
        self.call(WRITE, self.i64, [self.ir.Constant(self.i32, 2), self.pointer(address), length])

    def sigaction(self, signum: Any, action: int) -> None:
        null = self.ir.Constant(self.ptr, None)
        self.call(SIGACTION, self.i32, [signum, self.pointer(self.word(action)), null])

    def pointer(self, address: Any) -> Any:
        return self.b.inttoptr(address, self.ptr)


def _report(ir: Any, module: Any, root_address: int) -> Any:
    """``void report(int64 address)``: write the line of the row holding ``address``."""
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "report")
    function.linkage = "internal"
    blocks = [function.append_basic_block(n) for n in ("entry", "head", "body", "hit", "next")]
    entry, head, body, hit, step = blocks
    done = function.append_basic_block("done")
    c = _Code(ir, ir.IRBuilder(entry), root_address)
    b, address = c.b, function.args[0]
    high, capacity = c.word(HIGH), c.word(CAPACITY)
    high = b.select(b.icmp_signed("<", high, capacity), high, capacity)
    b.branch(head)
    b.position_at_end(head)
    row = b.phi(c.i64)
    row.add_incoming(c.const(0), entry)
    b.cbranch(b.icmp_signed("<", row, high), body, done)
    b.position_at_end(body)
    base = b.add(c.word(ROWS), b.mul(row, c.const(ROW_BYTES)))
    start, end = c.load64(base), c.load64(b.add(base, c.const(8 * END)))
    inside = b.and_(b.icmp_signed("<=", start, address), b.icmp_signed("<", address, end))
    b.cbranch(inside, hit, step)
    b.position_at_end(step)
    following = b.add(row, c.const(1))
    row.add_incoming(following, step)
    b.branch(head)
    b.position_at_end(hit)
    length = c.load64(b.add(base, c.const(8 * LENGTH)))
    length = b.select(b.icmp_signed("<", length, c.const(TEXT_BYTES)), length, c.const(TEXT_BYTES))
    length = b.select(b.icmp_signed("<", length, c.const(0)), c.const(0), length)
    c.write(c.word(HEADER), c.word(HEADER_LENGTH))
    c.write(b.add(base, c.const(TEXT_OFFSET)), length)
    c.write(c.word(SUFFIX), c.word(SUFFIX_LENGTH))
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return function


def _handler(ir: Any, module: Any, report: Any, root_address: int) -> None:
    """``void tokenloom_sigbus_handler(int, siginfo_t *, void *)``: the steps of the
    module doc."""
    i32, ptr = ir.IntType(32), ir.IntType(8).as_pointer()
    kind = ir.FunctionType(ir.VoidType(), [i32, ptr, ptr])
    function = ir.Function(module, kind, HANDLER_NAME)
    signum, info = function.args[0], function.args[1]
    entry, again, first, fault, sent = (
        function.append_basic_block(n) for n in ("entry", "again", "first", "fault", "sent")
    )
    c = _Code(ir, ir.IRBuilder(entry), root_address)
    b = c.b
    fired = c.word(FIRED)
    b.cbranch(b.icmp_signed("!=", fired, c.const(0)), again, first)
    b.position_at_end(again)
    c.sigaction(signum, ORIGINAL)
    c.call(RAISE, i32, [signum])
    b.ret_void()
    b.position_at_end(first)
    b.store(c.const(1), b.inttoptr(c.const(root_address + 8 * FIRED), c.i64.as_pointer()))
    info_address = b.ptrtoint(info, c.i64)
    code = b.load(b.inttoptr(b.add(info_address, c.const(8)), i32.as_pointer()))
    b.cbranch(b.icmp_signed(">", code, ir.Constant(i32, 0)), fault, sent)
    b.position_at_end(fault)
    b.call(report, [c.load64(b.add(info_address, c.const(16)))])
    c.sigaction(signum, PREVIOUS)
    b.ret_void()
    b.position_at_end(sent)
    c.sigaction(signum, PREVIOUS)
    c.call(RAISE, i32, [signum])
    b.ret_void()


def compile_handler(root_address: int) -> tuple[int, Any]:
    """Compile the handler for the root words at ``root_address``; returns its C
    address and the engine that owns the code (keep it alive as long as the handler
    may run). Raises ImportError without llvmlite."""
    from llvmlite import binding, ir

    try:  # needed before llvmlite 0.45; later versions refuse the call
        binding.initialize()
    except Exception:  # noqa: BLE001, S110 - initialised automatically there
        pass
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    module = ir.Module(name="tokenloom_sigbus")
    _handler(ir, module, _report(ir, module, root_address), root_address)
    parsed = binding.parse_assembly(str(module))
    parsed.verify()
    machine = binding.Target.from_default_triple().create_target_machine()
    engine = binding.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return int(engine.get_function_address(HANDLER_NAME)), engine
