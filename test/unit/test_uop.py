"""UOp basics: interning, toposort, vmin/vmax bounds, variables."""
import math, pickle, unittest
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType, sym_infer, resolve, smax

def c(v, dtype=dtypes.index): return UOp.const(dtype, v)
def rng(end, n=0): return UOp(Ops.RANGE, dtypes.index, (end if isinstance(end, UOp) else c(end),), arg=(n, AxisType.LOOP))

class TestInterning(unittest.TestCase):
    def test_equal_construction_same_object(self):
        x = UOp.variable("x", 0, 10)
        self.assertIs(UOp.variable("x", 0, 10), x)
        self.assertIs(x + 1, x + 1)
        self.assertIs((x * 2 + 1) // 3, (x * 2 + 1) // 3)
        self.assertIs(UOp(Ops.ADD, dtypes.index, (x, c(1))), x + 1)
        self.assertIs(c(3), c(3))

    def test_different_construction_different_object(self):
        x = UOp.variable("x", 0, 10)
        self.assertIsNot(UOp.variable("x", 0, 11), x)
        self.assertIsNot(x + 1, 1 + x)
        self.assertIsNot(c(3), c(3, dtypes.int32))
        self.assertIsNot(c(3), c(4))

    def test_zero_and_negative_zero_distinct(self):
        pz, nz = c(0.0, dtypes.float32), c(-0.0, dtypes.float32)
        self.assertIsNot(pz, nz)
        self.assertEqual(math.copysign(1.0, nz.arg), -1.0)
        self.assertEqual(math.copysign(1.0, pz.arg), 1.0)
        self.assertIs(c(-0.0, dtypes.float32), nz)

    def test_true_and_one_distinct(self):
        t = UOp(Ops.CONST, dtypes.index, arg=True)
        one = UOp(Ops.CONST, dtypes.index, arg=1)
        self.assertIsNot(t, one)
        self.assertIs(type(one.arg), int)
        self.assertIs(UOp(Ops.CONST, dtypes.index, arg=1.0), UOp(Ops.CONST, dtypes.index, arg=1.0))
        self.assertIsNot(UOp(Ops.CONST, dtypes.index, arg=1.0), one)

    def test_nan_interned(self):
        self.assertIs(c(math.nan, dtypes.float32), c(math.nan, dtypes.float32))

    def test_equality_is_identity(self):
        x = UOp.variable("x", 0, 10)
        self.assertTrue((x + 1) == (x + 1))
        self.assertFalse((x + 1) == (x + 2))
        self.assertEqual(len({x + 1, x + 1, x + 2}), 2)

    def test_pickle_roundtrip_interns(self):
        x = UOp.variable("x", 0, 10)
        e = (x * 3 + 1) % 5
        self.assertIs(pickle.loads(pickle.dumps(e)), e)

    def test_const_wraps_to_dtype(self):
        self.assertEqual(c(256, dtypes.uint8).arg, 0)
        self.assertEqual(c(-1, dtypes.uint8).arg, 255)
        self.assertEqual(c(2**40).arg, 2**40)   # index doesn't wrap

class TestToposort(unittest.TestCase):
    def test_order(self):
        x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
        shared = x + y
        root = shared * shared + x
        order = list(root.toposort)
        self.assertIs(order[-1], root)
        self.assertEqual(len(order), len(set(order)))
        pos = {n: k for k, n in enumerate(order)}
        for n in order:
            for s in n.src: self.assertLess(pos[s], pos[n])
        self.assertEqual(set(order), {x, y, shared, shared * shared, root})

    def test_src_order(self):
        x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
        order = list((x + y).toposort)
        self.assertLess(order.index(x), order.index(y))   # sources in order

    def test_deep(self):
        e = UOp.variable("x", 0, 10)
        for _ in range(5000): e = -e
        self.assertEqual(len(e.toposort), 5001)

    def test_reaching_and_substitute_many(self):
        # one walk for many roots: which nodes reach a target, and every root rebuilt as substitute() rebuilds it,
        # the parts that don't reach a target kept as the same objects
        x, y, z = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10), UOp.variable("z", 0, 10)
        shared = x + y
        roots = [shared * 2, (shared + z) * shared, z * 3]
        reads = UOp.reaching(roots, {y})
        self.assertEqual([reads[r] for r in roots], [True, True, False])
        self.assertTrue(reads[shared] and not reads[x] and not reads[z])
        new = UOp.substitute_many(roots, {y: z + 1})
        self.assertEqual(new, [r.substitute({y: z + 1}) for r in roots])
        self.assertIs(new[2], roots[2])
        self.assertIs(new[1].src[0].src[1], z)

    def test_reaching_answers_from_a_cached_ancestry(self):
        # a graph whose ancestry is cached (toposort) answers at its root: the walk doesn't go below it, and
        # substitute_many still rebuilds through it
        x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
        inner = (x + y) * 3
        root = inner + 1
        root.toposort
        reads = UOp.reaching([root], {x})
        self.assertEqual(reads, {root: True})
        self.assertIs(UOp.substitute_many([root], {x: y})[0], ((y + y) * 3) + 1)

    def test_substitute_many_deep(self):
        e = UOp.variable("x", 0, 10)
        for _ in range(5000): e = -e
        out, = UOp.substitute_many([e], {UOp.variable("x", 0, 10): UOp.variable("y", 0, 10)})
        self.assertEqual(out.toposort.ancestors.__len__(), 5000)
        self.assertIs(next(iter(out.toposort)), UOp.variable("y", 0, 10))

class TestBounds(unittest.TestCase):
    def test_const(self): self.assertEqual(c(7).vmin_vmax, (7, 7))
    def test_define_var(self): self.assertEqual(UOp.variable("x", -3, 9).vmin_vmax, (-3, 9))
    def test_range(self):
        self.assertEqual(rng(10).vmin_vmax, (0, 9))
        self.assertEqual(rng(UOp.variable("n", 1, 8)).vmin_vmax, (0, 7))
    def test_add(self):
        self.assertEqual((UOp.variable("x", -3, 9) + UOp.variable("y", 2, 4)).vmin_vmax, (-1, 13))
        self.assertEqual((rng(10) + 5).vmin_vmax, (5, 14))
    def test_neg_sub(self):
        x = UOp.variable("x", -3, 9)
        self.assertEqual((-x).vmin_vmax, (-9, 3))
        self.assertEqual((x - UOp.variable("y", 2, 4)).vmin_vmax, (-7, 7))
    def test_mul(self):
        x, y = UOp.variable("x", -3, 9), UOp.variable("y", -2, 4)
        self.assertEqual((x * y).vmin_vmax, (-18, 36))
        self.assertEqual((x * -2).vmin_vmax, (-18, 6))
        self.assertEqual((rng(4) * 3).vmin_vmax, (0, 9))
    def test_mod(self):
        self.assertEqual((UOp.variable("x", 0, 100) % 7).vmin_vmax, (0, 6))
        self.assertEqual((UOp.variable("x", 2, 5) % 7).vmin_vmax, (2, 5))
        self.assertEqual((UOp.variable("x", 0, 3) % 7).vmax, 3)
        lo, hi = (UOp.variable("x", -10, 10) % 4).vmin_vmax   # C: the sign of the dividend
        self.assertLessEqual(lo, -3)
        self.assertGreaterEqual(hi, 3)
        self.assertGreaterEqual(lo, -3)
        self.assertLessEqual(hi, 3)
        lo, hi = (UOp.variable("x", -10, -1) % 4).vmin_vmax
        self.assertTrue(lo <= -3 and hi >= -1 and hi <= 0)
    def test_idiv(self):
        self.assertEqual((UOp.variable("x", 0, 100) // 7).vmin_vmax, (0, 14))
        self.assertEqual((UOp.variable("x", -9, 9) // 4).vmin_vmax, (-2, 2))   # truncation: -9/4 == -2
        self.assertEqual((UOp.variable("x", -9, 9) // -4).vmin_vmax, (-2, 2))
        self.assertEqual((UOp.variable("x", 3, 9) // -2).vmin_vmax, (-4, -1))
        self.assertEqual((rng(12) // 4).vmin_vmax, (0, 2))
    def test_max_where(self):
        x, y = UOp.variable("x", -3, 9), UOp.variable("y", 0, 4)
        self.assertEqual(x.maximum(y).vmin_vmax, (0, 9))
        self.assertEqual((x < 0).where(y, x).vmin_vmax, (-3, 9))
    def test_comparisons(self):
        x = UOp.variable("x", 0, 5)
        self.assertEqual((x < 6).vmin_vmax, (True, True))
        self.assertEqual((x < 0).vmin_vmax, (False, False))
        self.assertEqual((x < 3).vmin_vmax, (False, True))
        self.assertEqual(x.ne(7).vmin_vmax, (True, True))
    def test_bounds_cover_values(self):
        # every value in the variables' ranges lands inside the expression's bounds
        x, y = UOp.variable("x", -4, 6), UOp.variable("y", 1, 3)
        for e, f in [((x * y) // 3, lambda a, b: int(a * b / 3)), ((x + y) % 3, lambda a, b: math.fmod(a + b, 3)),
                     (x * 5 - y, lambda a, b: a * 5 - b)]:
            lo, hi = e.vmin_vmax
            for a in range(-4, 7):
                for b in range(1, 4): self.assertTrue(lo <= f(a, b) <= hi)

class TestVariables(unittest.TestCase):
    def test_bind_unbind(self):
        x = UOp.variable("x", 1, 10)
        bx = x.bind(3)
        self.assertIs(bx.op, Ops.BIND)
        self.assertEqual(bx.unbind(), (x, 3))
        self.assertEqual(bx.val, 3)
        self.assertEqual(bx.expr, "x")
        self.assertEqual(x.expr, "x")
        self.assertIs(x.bind(3), bx)
        self.assertEqual(bx.vmin_vmax, (1, 10))
    def test_bind_bounds_inclusive(self):
        x = UOp.variable("x", 1, 10)
        self.assertEqual(x.bind(1).val, 1)
        self.assertEqual(x.bind(10).val, 10)
    def test_bind_out_of_bounds(self):
        x = UOp.variable("x", 1, 10)
        with self.assertRaises(ValueError): x.bind(0)
        with self.assertRaises(ValueError): x.bind(11)
    def test_bind_errors(self):
        x = UOp.variable("x", 1, 10)
        with self.assertRaises(TypeError): x.bind(2.5)
        with self.assertRaises(TypeError): (x + 1).bind(2)
        with self.assertRaises(TypeError): x.unbind()
    def test_invalid_variable(self):
        with self.assertRaises(ValueError): UOp.variable("x", 5, 4)
        with self.assertRaises(ValueError): UOp.variable("x", 0.5, 4)
    def test_vars(self):
        x, y = UOp.variable("x", 1, 10), UOp.variable("y", 1, 10)
        self.assertEqual((x * 2 + y.bind(3)).vars(), {x, y, y.bind(3)})   # the DEFINE_VAR under a BIND counts too
    def test_sym_infer(self):
        x = UOp.variable("x", 1, 10)
        self.assertEqual(sym_infer(x * 2 + 1, {x: 3}), 7)
        self.assertEqual(sym_infer(5, {}), 5)
    def test_resolve(self):
        x = UOp.variable("x", 1, 10)
        self.assertTrue(resolve(x < 11))
        self.assertFalse(resolve(x < 1))
        self.assertTrue(resolve(x < 5))                 # undecided -> default
        self.assertFalse(resolve(x < 5, default=False))
        with self.assertRaises(ValueError): bool(x < 5)
        self.assertEqual(smax(x, 0), x)
        self.assertEqual(smax(3, 7), 7)

if __name__ == "__main__":
    unittest.main()
