"""Graph mode: trace one call of a model, then replay the kernels it ran.

While a :class:`Recorder` is a device's ``recorder`` (see the protocol at the top of
:mod:`singa.autograd.engine`), every array computation is reported as
``record(fn, in_arrays, out_arrays, ...)``: operator forwards, operator backwards,
gradient sums, the optimizer's in-place updates and its per-step bookkeeping.
Arrays are mapped to value slots by identity while tracing. Inputs and external arrays
are kept alive; a kernel's output is only watched (a weak reference that forgets its
identity when it dies), so a trace holds no more memory than an eager step and a
reused identity is never taken for a dead array's slot. An array that no recorded
call produced is an input (the Tensor arguments of the traced call) or external:
a parameter, a buffer, an optimizer state or a constant, captured by reference and
mutated in place by the kernels that update it.

A :class:`Graph` turns the trace into one straight-line Python function (generated
source, one line per kernel), so a replay runs the kernels with no autograd
bookkeeping: new input arrays are bound to the input slots, each kernel runs on the
slot arrays, each operator's ``cache`` is refilled by its forward and dropped after
its backward (as the eager engine does), and each slot is released right after its
last use. Because the very same functions run on the same values in the same order,
a replay gives bitwise the same results as eager execution on the same device.

``sequential=True`` replays in the recorded order. ``sequential=False`` schedules by
dependencies (data, operator caches, reads and in-place writes of parameters and
buffers, random draws, optimizer bookkeeping) and adds memory optimizations that
cannot change any result:

- gradients that nothing uses (e.g. of an input batch created with the default
  ``requires_grad=True``) are not computed: the operator's ``needs_grad`` entry is
  turned off, and backward kernels whose outputs are all unused are dropped;
- gradient sums are done in place into a dead, exclusively owned buffer;
- a gradient whose last use is its parameter's update is handed to the optimizer
  as scratch space (``donate``), saving the update's temporaries;
- among the kernels ready to run, those that release memory go first.

Limits of tracing (the same as any trace-based graph mode):

- Python control flow on tensor *values* (``if loss.to_numpy() > 1``), raw array code
  on ``tensor.data``, ``to_numpy``/``as_type``/comparison results and other values
  computed outside :mod:`singa.autograd` operators are evaluated once, while tracing,
  and frozen into the graph as constants (so are non-Tensor values the call returns).
  Write such code with operators, or run it outside ``train_one_batch``.
- A new trace is made for every new signature (training mode, shapes, dtypes and
  ``requires_grad`` of the Tensor arguments, the values of the other arguments, the
  ``sequential`` flag), so shape-dependent Python branches are handled by retracing.
- Parameters must keep their array objects (update them in place, as optimizers and
  ``set_states`` do); a parameter whose array was replaced triggers a new trace.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

from singa.autograd import engine
from singa.model import _inplace

__all__ = ["Recorder", "Graph", "Node"]

_EXT, _IN, _OUT = 0, 1, 2


class Node:
    """One recorded kernel call: ``fn(*arrays of ins)`` gives the arrays of ``outs``
    (slot numbers; None for a missing input or an unused output). ``op`` is the
    operator of a forward or backward call (None for other calls), ``random`` says the
    call drew random numbers, ``inplace`` lists its checked in-place variants."""

    __slots__ = ("index", "fn", "ins", "outs", "op", "is_backward", "random", "cache_bytes", "inplace")

    def __init__(self, index, fn, ins, outs, op, is_backward, random, cache_bytes, inplace):
        self.index = index
        self.fn = fn
        self.ins = ins
        self.outs = outs
        self.op = op
        self.is_backward = is_backward
        self.random = random
        self.cache_bytes = cache_bytes
        self.inplace = inplace

    def __repr__(self) -> str:
        kind = "backward" if self.is_backward else "forward" if self.op is not None else "call"
        name = type(self.op).__name__ if self.op is not None else getattr(self.fn, "__name__", "fn")
        return f"<{kind} {name} {self.ins} -> {self.outs}>"


def _nbytes(obj: Any) -> int:
    """Bytes of the arrays in ``obj`` (an array, or tuples/lists/dicts of them)."""
    if hasattr(obj, "nbytes") and hasattr(obj, "shape"):
        return int(obj.nbytes) if getattr(obj, "base", None) is None else 0
    if isinstance(obj, tuple | list):
        return sum(_nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(o) for o in obj.values())
    return 0


def _forget(slots: dict, key: int, s: int) -> None:
    """Drop identity ``key`` from the map ``slots`` if it still names slot ``s``."""
    if slots.get(key) == s:
        del slots[key]


class Recorder:
    """Collects the kernels run on a device while a call is traced.

    Args:
        dev: the traced device (its ``recorder`` is set by the caller).
        inputs: the input arrays, one slot each, in argument order.
        inplace: check the in-place variants of the traced kernels (for
            ``sequential=False``; see :mod:`singa.model._inplace`).
    """

    def __init__(self, dev: Any, inputs: Sequence[Any], inplace: bool = False):
        self.dev = dev
        self.inplace = inplace
        self.nodes: list[Node] = []
        self.arrays: list[Any] = []  # slot -> input or external array (None: an output)
        self.kinds: list[int] = []
        self.sizes: list[int] = []  # slot -> bytes it owns (0 for a view)
        self.roots: list[int] = []  # slot -> id of the array owning its memory
        self.ndims: list[int] = []  # slot -> number of dimensions of its array
        self._slot: dict[int, int] = {}
        self.input_slots = [self._input(a) for a in inputs]
        self._extra_nodes = 0
        self._rng_cpu = not dev.is_gpu
        self._rng_state = self._rng_token()

    def _new(self, arr: Any, kind: int) -> int:
        s = len(self.arrays)
        self.kinds.append(kind)
        self.sizes.append(_nbytes(arr))
        self.roots.append(id(_root(arr)))
        self.ndims.append(getattr(arr, "ndim", 0))
        self._slot[id(arr)] = s
        if kind == _OUT and self._watch(arr, s):
            self.arrays.append(None)
        else:
            self.arrays.append(arr)
        return s

    def _watch(self, arr: Any, s: int) -> bool:
        """Forget ``arr``'s identity when it dies (so that a later array with the same
        ``id`` gets a slot of its own); False when it cannot be watched (then it is kept)."""
        try:  # the callback holds the identity map only, not the recorder
            weakref.finalize(arr, _forget, self._slot, id(arr), s)
        except TypeError:
            return False
        return True

    def _input(self, arr: Any) -> int:
        s = self._slot.get(id(arr))
        return s if s is not None else self._new(arr, _IN)

    def slot(self, arr: Any) -> int:
        """The slot of ``arr``; arrays seen for the first time are external."""
        s = self._slot.get(id(arr))
        return s if s is not None else self._new(arr, _EXT)

    def add_constant(self, arr: Any) -> int:
        """A new external slot holding ``arr`` (e.g. weights computed from the traced
        ones by a rewrite of :attr:`nodes`)."""
        return self._new(arr, _EXT)

    def new_node(self, fn: Any, ins: Sequence[int | None], outs: Sequence[int | None]) -> Node:
        """A node calling ``fn`` that belongs to no operator (for rewrites of
        :attr:`nodes`): ``fn(*ins)`` computes ``outs``; its index is unique."""
        self._extra_nodes += 1
        index = len(self.nodes) + self._extra_nodes + 1_000_000
        return Node(index, fn, list(ins), list(outs), None, False, False, 0, [])

    def is_external(self, s: int) -> bool:
        """Whether slot ``s`` holds an array no recorded call produced (a parameter,
        buffer or constant) that is not an input."""
        return self.kinds[s] == _EXT

    def _rng_token(self) -> Any:
        if self._rng_cpu:
            st = self.dev.rng.bit_generator.state
            return (str(st.get("state")), st.get("has_uint32"), st.get("uinteger"))
        return None

    def record(
        self,
        fn: Any,
        in_arrays: Sequence[Any],
        out_arrays: Sequence[Any],
        op: Any = None,
        tensors: Any = None,
        is_backward: bool = False,
    ) -> None:
        """Append one kernel: ``fn(*in_arrays)`` recomputes ``out_arrays``."""
        ins = [None if a is None else self.slot(a) for a in in_arrays]
        outs = [None if a is None else self._new(a, _OUT) for a in out_arrays]
        if self._rng_cpu:
            token = self._rng_token()
            random = token != self._rng_state
            self._rng_state = token
        else:  # cupy does not expose its generator state: keep every forward in order
            random = op is not None and not is_backward
        cache_bytes = _nbytes(op.cache) if op is not None and not is_backward else 0
        variants = []
        if self.inplace and op is not None:
            variants = _inplace.find_variants(op, is_backward, list(in_arrays), tuple(out_arrays))
        node = Node(len(self.nodes), fn, ins, outs, op, is_backward, random, cache_bytes, variants)
        self.nodes.append(node)


# ----- the graph ---------------------------------------------------------------------------
class Graph:
    """A traced call, replayable on new inputs of the same signature.

    Args:
        rec: the recorder of the trace.
        out_template: the output structure from :func:`flatten_outputs`.
        out_arrays: the arrays of the output Tensors, in template order.
        sequential: replay in recorded order (True) or schedule by dependencies with
            the memory optimizations described in the module docstring (False).
    """

    #: whether the graph holds weights computed from the parameters (BatchNorm folded
    #: into them, Winograd filters; see :mod:`singa.model.inference`): then it is valid
    #: only while the parameters keep their ``stamp``
    folded: bool = False
    stamp: Any = None
    #: the rewrites applied before scheduling, counted by name (training:
    #: :mod:`singa.model.training_fusion`; evaluation: :mod:`singa.model.inference`)
    fusions: Counter

    def __init__(self, rec: Recorder, out_template: Any, out_arrays: Sequence[Any], sequential: bool):
        self.dev = rec.dev
        self.fusions = Counter()
        self.sequential = sequential
        self.out_template = out_template
        self.n_nodes = len(rec.nodes)
        out_slots = [rec.slot(a) for a in out_arrays]
        self.input_slots = rec.input_slots
        nodes = rec.nodes
        kinds = rec.kinds
        self.disabled_grads = 0
        if sequential:
            order = list(range(len(nodes)))
        else:
            nodes = self._prune(nodes, kinds, out_slots)
            order = self._schedule(nodes, rec, out_slots)
        self.order = order
        self._copy_inputs = self._aliased_inputs(rec)
        self._traced_inputs = [rec.arrays[s] for s in rec.input_slots]
        self.source, ns = self._generate(nodes, order, rec.arrays, kinds, out_slots)
        exec(compile(self.source, f"<singa graph {id(self):x}>", "exec"), ns)
        self._fn = ns["replay"]

    # ----- pruning: drop gradients nobody uses (sequential=False) ----------------------
    def _prune(self, nodes: list[Node], kinds: list[int], out_slots: list[int]) -> list[Node]:
        """Turn off gradients that no kernel uses, repeatedly (their producers may become
        unused in turn). Returns the surviving nodes (original indices kept)."""
        alive = {n.index: n for n in nodes}
        used = _use_counts(nodes, out_slots)
        changed = True
        while changed:
            changed = False
            for n in list(alive.values()):
                if not self._drop_unused_grads(n, used):
                    continue
                changed = True
                if all(s is None for s in n.outs):
                    # nothing of this backward is used: drop it, its inputs lose a use
                    del alive[n.index]
                    for s in n.ins:
                        if s is not None:
                            used[s] -= 1
                    n.op.requires_grad = False  # its forward need not fill a cache
        return [n for n in nodes if n.index in alive]

    def _drop_unused_grads(self, n: Node, used: dict[int, int]) -> bool:
        """Turn off the gradients of backward node ``n`` that nothing uses (its
        operator's ``needs_grad`` entries and its output slots); True if any was."""
        if not n.is_backward or n.op is None:
            return False
        dead = [i for i, s in enumerate(n.outs) if s is not None and used.get(s, 0) == 0]
        needs = list(n.op.needs_grad)
        if not dead or len(needs) < len(n.outs):  # a backward may leave off trailing inputs
            return False
        for i in dead:
            needs[i] = False
            n.outs[i] = None
            self.disabled_grads += 1
        n.op.needs_grad = tuple(needs)
        return True

    # ----- scheduling (sequential=False) ----------------------------------------------
    @staticmethod
    def _schedule(nodes: list[Node], rec: Recorder, out_slots: list[int]) -> list[int]:
        """A dependency-respecting order (positions into ``nodes``) that runs first,
        among the ready kernels, those that release memory; ties keep recorded order."""
        deps = _dependencies(nodes, rec.roots, rec.kinds)
        return _topological_order(nodes, deps, _MemoryBalance(nodes, rec.sizes, rec.kinds, out_slots))

    # ----- inputs that something captured aliases -------------------------------------
    @staticmethod
    def _aliased_inputs(rec: Recorder) -> list[bool]:
        """Inputs that an external array shares memory with (a view made outside the
        recorded operators): new data must be copied into the traced buffer."""
        ext = [rec.arrays[s] for s in range(len(rec.arrays)) if rec.kinds[s] == _EXT]
        flags = []
        for s in rec.input_slots:
            a = rec.arrays[s]
            may = getattr(rec.dev.xp, "may_share_memory", None)
            flags.append(any(e is not a and may is not None and may(e, a) for e in ext))
        return flags

    # ----- code generation ----------------------------------------------------------------
    def _generate(
        self, nodes: list[Node], order: list[int], arrays: list[Any], kinds: list[int], out_slots: list[int]
    ) -> tuple[str, dict]:
        """The replay function's source (one line per kernel call, cache release and
        ``del`` of dead slots) and the namespace it runs in."""
        src = _Source(arrays, kinds)
        self.inplace_kernels = 0
        last = _last_uses(nodes, order, kinds, out_slots)
        src.lines.append(f"def replay({', '.join(src.ref(s) for s in self.input_slots)}):")
        uncleared: dict[int, Any] = {}
        for p, i in enumerate(order):
            n = nodes[i]
            dead_after = {s for s in n.ins if s is not None and kinds[s] != _EXT and last.get(s) == p}
            self._emit_call(src, n, dead_after, last)
            _emit_cache_release(src, n, uncleared)
            freed = [src.names[s] for s in sorted(dead_after) if s in src.names]
            if freed:
                src.lines.append(f"    del {', '.join(freed)}")
        for k, op in enumerate(uncleared.values()):
            src.ns[f"u{k}"] = op
            src.lines.append(f"    u{k}.cache = None")
        outs = [src.ref(s) for s in out_slots]
        src.lines.append(f"    return ({', '.join(outs)}{',' if outs else ''})")
        return "\n".join(src.lines) + "\n", src.ns

    def _emit_call(self, src: _Source, n: Node, dead_after: set, last: dict[int, int]) -> None:
        """The line calling node ``n``'s kernel (in place when it may) and binding its
        outputs that something uses later."""
        fname = f"f{n.index}"
        src.ns[fname] = n.fn
        args = [src.ref(s) for s in n.ins]
        if not self.sequential:
            fname = self._reuse(n, fname, args, dead_after, src.ns)
        call = f"{fname}({', '.join(args)})"
        outs = [src.ref(s) if s is not None and s in last else "_" for s in n.outs]
        if all(o == "_" for o in outs):
            src.lines.append(f"    {call}")
        elif len(outs) == 1:
            src.lines.append(f"    {outs[0]} = {call}")
            src.lines.append(f"    if {outs[0]}.__class__ is tuple: {outs[0]} = {outs[0]}[0]")
        else:
            src.lines.append(f"    {', '.join(outs)}, = {call}")

    def _reuse(self, n: Node, fname: str, args: list, dead: set, ns: dict) -> str:
        """The name to call for node ``n``: an in-place form when an input it may write
        into is dead after it (reordering ``args`` if needed), else ``fname``."""
        once = [s for s in n.ins if s in dead and n.ins.count(s) == 1]
        if n.fn is engine.sum_gradients and len(n.ins) == 2:
            if n.ins[0] in once:
                self.inplace_kernels += 1
                return "_add_into"
            if n.ins[1] in once:  # b + a is a + b
                args.reverse()
                self.inplace_kernels += 1
                return "_add_into"
            return fname
        if isinstance(n.fn, engine.DonatingUpdate) and len(n.ins) == 2 and n.ins[1] in once:
            ns[f"d{n.index}"] = _inplace.donating(n.fn)
            self.inplace_kernels += 1
            return f"d{n.index}"
        for variant, k in n.inplace:
            if n.ins[k] in once:
                ns[f"i{n.index}"] = _inplace.inplace_call(variant, n.op, n.fn, k, len(n.ins))
                self.inplace_kernels += 1
                return f"i{n.index}"
        return fname

    # ----- running --------------------------------------------------------------------
    def __call__(self, arrays: Sequence[Any]) -> tuple:
        """Replay on new input arrays (shapes and dtypes as traced); returns the output
        arrays in template order."""
        if any(self._copy_inputs):
            xp = self.dev.xp
            arrays = list(arrays)
            for i, copy in enumerate(self._copy_inputs):
                traced = self._traced_inputs[i]
                if copy and arrays[i] is not traced:
                    xp.copyto(traced, arrays[i])
                    arrays[i] = traced
        return self._fn(*arrays)

    def __repr__(self) -> str:
        mode = "sequential" if self.sequential else "scheduled"
        return f"Graph({len(self.order)} kernels, {mode})"


def _root(a: Any) -> Any:
    """The array that owns ``a``'s memory."""
    b = getattr(a, "base", None)
    while b is not None and getattr(b, "base", None) is not None:
        b = b.base
    return a if b is None else b


# ----- helpers of pruning, scheduling and code generation -----------------------------------
def _use_counts(nodes: list[Node], out_slots: list[int]) -> dict[int, int]:
    """How many times each slot is read (by a node, or as an output of the call)."""
    used: dict[int, int] = {}
    for s in [s for n in nodes for s in n.ins] + list(out_slots):
        if s is not None:
            used[s] = used.get(s, 0) + 1
    return used


def _dependencies(nodes: list[Node], roots_of: list[int], kinds: list[int]) -> list[set]:
    """For each node, the earlier nodes it must run after: the producers of its
    inputs; for a backward, its forward; the previous node touching the same external
    memory (parameters, buffers, states: read or written in place; a backward touches
    what its forward did); the previous random draw; the previous side effect (a node
    with no outputs)."""
    producer = {s: i for i, n in enumerate(nodes) for s in n.outs if s is not None}
    ext_roots = {roots_of[s] for s in range(len(roots_of)) if kinds[s] == _EXT}
    forward_of: dict[int, int] = {}
    fwd_touch: dict[int, set] = {}
    last_touch: dict[int, int] = {}
    serial: list = [None, None]  # the last random draw, the last side effect
    deps: list[set] = []
    for i, n in enumerate(nodes):
        d = {producer[s] for s in n.ins if s is not None and producer.get(s, i) < i}
        roots = {roots_of[s] for s in n.ins if s is not None} & ext_roots
        roots = _link_forward(n, i, d, roots, forward_of, fwd_touch)
        for r in roots:
            if r in last_touch:
                d.add(last_touch[r])
            last_touch[r] = i
        _after_previous(d, serial, 0, i, n.random)
        _after_previous(d, serial, 1, i, all(s is None for s in n.outs))
        d.discard(i)
        deps.append(d)
    return deps


def _link_forward(n: Node, i: int, d: set, roots: set, forward_of: dict, fwd_touch: dict) -> set:
    """Record forward node ``i``; or make backward node ``i`` depend on its forward and
    touch what the forward touched. Returns the memory roots node ``i`` touches."""
    if n.op is None:
        return roots
    key = id(n.op)
    if not n.is_backward:
        forward_of[key] = i
        fwd_touch[key] = roots
        return roots
    if key in forward_of:
        d.add(forward_of[key])
    return roots | fwd_touch.get(key, set())


def _after_previous(d: set, serial: list, k: int, i: int, applies: bool) -> None:
    """Chain node ``i`` after the previous node of chain ``k`` when ``applies``."""
    if not applies:
        return
    if serial[k] is not None:
        d.add(serial[k])
    serial[k] = i


class _MemoryBalance:
    """What running a node would allocate minus what it would release, as the
    schedule advances (slots whose last remaining use it is, its operator's cache)."""

    def __init__(self, nodes: list[Node], sizes: list[int], kinds: list[int], out_slots: list[int]):
        self.kinds = kinds
        self.uses: dict[int, int] = {}
        for n in nodes:
            for s in n.ins:
                if s is not None and kinds[s] != _EXT:
                    self.uses[s] = self.uses.get(s, 0) + 1
        self.keep = set(out_slots)
        self.size = sizes
        self.cache_of = {id(n.op): n.cache_bytes for n in nodes if n.op is not None and not n.is_backward}

    def delta(self, n: Node) -> int:
        """Bytes allocated minus bytes released by running ``n`` now."""
        freed = 0
        counted = set()
        for s in n.ins:
            if s is None or self.kinds[s] == _EXT or s in self.keep or s in counted:
                continue
            if self.uses[s] == n.ins.count(s):
                freed += self.size[s]
                counted.add(s)
        if n.is_backward:
            freed += self.cache_of.get(id(n.op), 0)
        alloc = sum(self.size[s] for s in n.outs if s is not None) + n.cache_bytes
        return alloc - freed

    def ran(self, n: Node) -> None:
        """``n`` was scheduled: its inputs have one use less."""
        for s in n.ins:
            if s is not None and self.kinds[s] != _EXT:
                self.uses[s] -= 1


def _topological_order(nodes: list[Node], deps: list[set], balance: _MemoryBalance) -> list[int]:
    """Kahn's algorithm; among the ready nodes, those that release memory first, then
    recorded order."""
    succ: list[list[int]] = [[] for _ in nodes]
    indeg = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            succ[j].append(i)
    ready = [i for i in range(len(nodes)) if indeg[i] == 0]
    order: list[int] = []
    while ready:
        best = min(ready, key=lambda i: (balance.delta(nodes[i]) > 0, i))
        ready.remove(best)
        order.append(best)
        balance.ran(nodes[best])
        for j in succ[best]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if len(order) != len(nodes):  # pragma: no cover - a cycle would be a recorder bug
        raise RuntimeError("graph: dependency cycle while scheduling")
    return order


def _last_uses(nodes: list[Node], order: list[int], kinds: list[int], out_slots: list[int]) -> dict:
    """The position in ``order`` of each internal slot's last use (outputs of the call:
    past the end)."""
    last: dict[int, int] = {}
    for p, i in enumerate(order):
        for s in nodes[i].ins:
            if s is not None and kinds[s] != _EXT:
                last[s] = p
    for s in out_slots:
        if kinds[s] != _EXT:
            last[s] = len(order)
    return last


class _Source:
    """The generated replay function being written: its lines, the namespace it will
    run in, and the names of the slots (``c<k>`` external arrays bound in the
    namespace, ``v<k>`` locals)."""

    def __init__(self, arrays: list[Any], kinds: list[int]):
        self.arrays = arrays
        self.kinds = kinds
        self.ns: dict[str, Any] = {"_add_into": _inplace.add_into}
        self.names: dict[int, str] = {}
        self.lines: list[str] = []

    def ref(self, s: int | None) -> str:
        """The name of slot ``s`` ("None" for a missing input)."""
        if s is None:
            return "None"
        if s not in self.names:
            if self.kinds[s] == _EXT:
                self.names[s] = f"c{s}"
                self.ns[self.names[s]] = self.arrays[s]
            else:
                self.names[s] = f"v{s}"
        return self.names[s]


def _emit_cache_release(src: _Source, n: Node, uncleared: dict[int, Any]) -> None:
    """After a backward, drop its operator's cache (as the eager engine does); note
    forwards that filled one, to drop those no backward ran for at the end."""
    if n.op is None:
        return
    if n.is_backward:
        oname = f"o{n.index}"
        src.ns[oname] = n.op
        src.lines.append(f"    {oname}.cache = None")
        uncleared.pop(id(n.op), None)
    elif n.op.requires_grad:
        uncleared[id(n.op)] = n.op
