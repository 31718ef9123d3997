# Cython declarations for the compiled copy of pipeline_steady.py (lmmsim/native.py); Python ignores
# this file. The steady loop's times as C doubles: IEEE doubles like Python's floats, the same
# operations in the same order (built without fused multiply-add), so the same values. Its counts,
# slot and stage indices and event ids as C integers (Cython keeps Python's % and // on them; all
# stay far below 2**63). (_advance binds ``need``, a grant's KV blocks, at its start: Cython cannot
# see that each grant finds it first.)
import cython

@cython.locals(t=cython.double, hold_end=cython.double, d=cython.double, u=cython.double, f=cython.double,
               stage_s=cython.double, later=cython.double, a=cython.double, start=cython.double,
               inf=cython.double, made=cython.Py_ssize_t, done_count=cython.Py_ssize_t,
               need=cython.Py_ssize_t, kv_free=cython.Py_ssize_t, cur=cython.Py_ssize_t,
               s=cython.Py_ssize_t, s_step=cython.Py_ssize_t, block_size=cython.Py_ssize_t)
cpdef tuple _advance(engine, ahead, double barrier, signals, block, line, state, next_id)
