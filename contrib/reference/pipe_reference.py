#!/usr/bin/env python3
"""pipe_reference.py - fixtures of DeepSpeed's pipeline schedules and layer
partitioning, made by running DeepSpeed's own code, for tests/unit/test_schedule.c.

    python3 contrib/reference/pipe_reference.py DEEPSPEED_CHECKOUT tests/data

reads DEEPSPEED_CHECKOUT/deepspeed/runtime/pipe/schedule.py (TrainSchedule,
InferenceSchedule) and the partition_uniform / partition_balanced functions
of DEEPSPEED_CHECKOUT/deepspeed/runtime/utils.py, runs them (no torch, no
DeepSpeed install: the one relative import of schedule.py is replaced by a
call_to_str of the same output, and the few numpy calls of the partition
functions by the small stand-in below) and writes

    pipe_schedule.txt   "train|infer M P S K: Instr(buffer_id=B); ..." one line per step
    pipe_partition.txt  "uniform|balanced N P W1,W2,...: part0 part1 ... partP"
"""
import ast
import math
import os
import sys


def call_to_str(base, *args, **kwargs):
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{base}({', '.join(parts)})"


class _Arr:
    """enough of a numpy array for partition_uniform/partition_balanced"""

    def __init__(self, data):
        self.d = data

    def _at(self, idx):
        if isinstance(idx, tuple):
            return self.d[idx[0]], idx[1]
        return self.d, idx

    def __getitem__(self, idx):
        row, i = self._at(idx)
        return row[i]

    def __setitem__(self, idx, v):
        if isinstance(idx, slice):
            if isinstance(v, _Arr):
                v = v.d
            self.d[idx] = v
            return
        row, i = self._at(idx)
        row[i] = v

    def __iadd__(self, other):
        return _Arr([x + other for x in self.d])

    def tolist(self):
        return list(self.d)



class _Np:
    inf = math.inf

    @staticmethod
    def full(shape, v):
        return _Arr([[v] * shape[1] for _ in range(shape[0])])

    @staticmethod
    def zeros(shape, dtype=None):
        if isinstance(shape, int):
            return _Arr([0] * shape)
        return _Arr([[0] * shape[1] for _ in range(shape[0])])

    @staticmethod
    def cumsum(w):
        out, t = [], 0
        for x in w:
            t += x
            out.append(t)
        return out

    @staticmethod
    def arange(start, stop, step):
        return _UArr(list(range(start, stop, step)))


class _UArr(_Arr):
    """partition_uniform's `parts[i + 1:] += 1`"""

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return _UView(self, idx)
        return super().__getitem__(idx)

    def __setitem__(self, idx, v):
        if isinstance(idx, slice) and isinstance(v, _UView):
            return
        super().__setitem__(idx, v)


class _UView:
    def __init__(self, base, sl):
        self.base, self.sl = base, sl

    def __iadd__(self, other):
        r = range(*self.sl.indices(len(self.base.d)))
        for i in r:
            self.base.d[i] += other
        return self


def load_functions(utils_path, names):
    tree = ast.parse(open(utils_path).read())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    mod = ast.Module(body=keep, type_ignores=[])
    g = {}
    exec(compile(mod, utils_path, "exec"), g)
    sys.modules["numpy"] = _Np
    return g


def main():
    ds, out = sys.argv[1], sys.argv[2]
    sched_src = open(os.path.join(ds, "deepspeed/runtime/pipe/schedule.py")).read()
    sched_src = sched_src.replace("from ..utils import call_to_str", "")
    g = {"call_to_str": call_to_str}
    exec(compile(sched_src, "schedule.py", "exec"), g)
    with open(os.path.join(out, "pipe_schedule.txt"), "w") as f:
        for kind, cls in (("train", g["TrainSchedule"]), ("infer", g["InferenceSchedule"])):
            for m, p in ((1, 1), (4, 1), (1, 2), (2, 2), (4, 2), (8, 2), (3, 3), (2, 4), (4, 4), (8, 4), (5, 3)):
                for s in range(p):
                    for k, cmds in enumerate(cls(micro_batches=m, stages=p, stage_id=s)):
                        f.write(f"{kind} {m} {p} {s} {k}: {'; '.join(repr(c) for c in cmds)}\n")
    fn = load_functions(os.path.join(ds, "deepspeed/runtime/utils.py"), {"partition_uniform", "partition_balanced"})
    cases = [
        ("uniform", [1] * 7, 2), ("uniform", [1] * 7, 4), ("uniform", [1] * 9, 4), ("uniform", [1] * 3, 4),
        ("uniform", [1] * 29, 8),
        ("balanced", [0, 0, 1, 1, 0, 0, 0], 2), ("balanced", [0, 0, 1, 1, 0, 0, 0], 4),
        ("balanced", [0, 0, 1, 1, 1, 1, 0, 0, 0], 2), ("balanced", [0, 0, 1, 1, 1, 1, 0, 0, 0], 3),
        ("balanced", [0, 0, 1, 1, 1, 1, 0, 0, 0], 4),
        ("balanced", [20480, 0, 50048, 50048, 0, 128, 20480], 2),
        ("balanced", [20480, 0, 50048, 50048, 0, 128, 20480], 4),
        ("balanced", [20480, 0, 50048, 50048, 0, 128, 16384], 3),
        ("balanced", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], 4), ("balanced", [7, 7, 7], 5),
        # NeoX's type:transformer|mlp: the *_transformer_block functions match too
        ("balanced", [0, 1, 1, 1, 1, 1, 1, 0, 0], 2), ("balanced", [0] + [1] * 46 + [0, 0], 4),
    ]
    with open(os.path.join(out, "pipe_partition.txt"), "w") as f:
        for kind, w, p in cases:
            parts = fn["partition_uniform"](len(w), p) if kind == "uniform" else fn["partition_balanced"](w, p)
            f.write(f"{kind} {len(w)} {p} {','.join(str(x) for x in w)}: {' '.join(str(int(x)) for x in parts)}\n")


if __name__ == "__main__":
    main()
