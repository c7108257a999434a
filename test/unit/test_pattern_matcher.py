"""Semantics of UPat, PatternMatcher and graph_rewrite."""
import sys, unittest
from collections import Counter
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, UPat, Ops, PatternMatcher, graph_rewrite, graph_rewrite_map
from fusegrad.uop.symbolic import symbolic

x = UOp.variable("x", 0, 10)
y = UOp.variable("y", 0, 10)
def c(v, dtype=dtypes.index): return UOp.const(dtype, v)
def matches(pat: UPat, u: UOp) -> list[dict]: return pat.match(u, {})

class TestUPatMatch(unittest.TestCase):
    def test_op_filter(self):
        self.assertEqual(len(matches(UPat(Ops.ADD), x + 1)), 1)
        self.assertEqual(matches(UPat(Ops.MUL), x + 1), [])
        self.assertEqual(len(matches(UPat((Ops.MUL, Ops.ADD)), x + 1)), 1)
        self.assertEqual(len(matches(UPat({Ops.MUL, Ops.ADD}), x * 2)), 1)

    def test_dtype_filter(self):
        self.assertEqual(len(matches(UPat.var("a", dtype=dtypes.index), x)), 1)
        self.assertEqual(matches(UPat.var("a", dtype=dtypes.float32), x), [])
        self.assertEqual(len(matches(UPat.var("a", dtype=(dtypes.float32, dtypes.index)), x)), 1)
        # a vector matches a pattern on its scalar dtype
        v = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (c(1.0, dtypes.float32),) * 4)
        self.assertEqual(len(matches(UPat(Ops.VECTORIZE, dtype=dtypes.float32), v)), 1)

    def test_arg_filter(self):
        self.assertEqual(len(matches(UPat.const(dtypes.index, 3), c(3))), 1)
        self.assertEqual(matches(UPat.const(dtypes.index, 3), c(4)), [])
        self.assertEqual(matches(UPat.const(dtypes.float32, 3.0), c(3)), [])   # dtype differs

    def test_ordered_src(self):
        pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("k")))
        (m,) = matches(pat, x + 1)
        self.assertIs(m["a"], x)
        self.assertIs(m["k"], c(1))
        self.assertEqual(matches(pat, 1 + x), [])

    def test_any_order_src(self):
        pat = UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("k")])
        for u in (x + 1, 1 + x):
            (m,) = matches(pat, u)
            self.assertIs(m["a"], x)
            self.assertIs(m["k"], c(1))
        self.assertEqual(matches(pat, x + y), [])

    def test_any_order_all_matches(self):
        # both orders match when both sources fit both patterns: one result per order
        pat = UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")])
        results = matches(pat, x + y)
        self.assertEqual(len(results), 2)
        self.assertEqual({(r["a"], r["b"]) for r in results}, {(x, y), (y, x)})

    def test_operator_patterns(self):
        self.assertEqual(len(matches(UPat.var("a") + 1, 1 + x)), 1)     # + is commutative
        self.assertEqual(len(matches(UPat.var("a") * 2, 2 * x)), 1)
        self.assertEqual(len(matches(UPat.var("a") // 2, x // 2)), 1)   # // is ordered
        self.assertEqual(matches(UPat.var("a") // 2, UOp.const(dtypes.index, 2) // x), [])
        self.assertEqual(len(matches(UPat.var("a") % 3, x % 3)), 1)
        self.assertEqual(len(matches(UPat.var("a") < 3, x < 3)), 1)

    def test_single_upat_matches_all_sources(self):
        pat = UPat(Ops.ADD, src=UPat(Ops.CONST))
        self.assertEqual(len(matches(pat, UOp(Ops.ADD, dtypes.index, (c(1), c(2))))), 1)
        self.assertEqual(matches(pat, x + 1), [])
        pat3 = UPat(Ops.WHERE, src=UPat.var("v"))
        self.assertEqual(matches(pat3, (x < 3).where(x, y)), [])   # the one name must be one UOp everywhere
        same = UOp(Ops.WHERE, dtypes.index, (x, x, x))
        (m,) = matches(pat3, same)
        self.assertIs(m["v"], x)

    def test_repeated_name_must_agree(self):
        pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
        (m,) = matches(pat, x + x)
        self.assertIs(m["a"], x)
        self.assertEqual(matches(pat, x + y), [])
        nested = UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar())), UPat.var("a")))
        self.assertEqual(len(matches(nested, (x + 1) * x)), 1)
        self.assertEqual(matches(nested, (x + 1) * y), [])

    def test_src_length(self):
        pat = UPat(Ops.ADD, src=(UPat.var("a"),))
        self.assertEqual(matches(pat, x + 1), [])
        anylen = UPat(Ops.ADD, src=(UPat.var("a"),), allow_any_len=True)
        self.assertEqual(len(matches(anylen, x + 1)), 1)

    def test_named_copy(self):
        base = UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("k")])
        pat = base.named("root")
        (m,) = matches(pat, 1 + x)
        self.assertIs(m["root"], 1 + x)
        self.assertIsNone(base.name)

class TestPatternMatcher(unittest.TestCase):
    def test_rewrite_returns_none_without_match(self):
        pm = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: c(0))])
        self.assertIsNone(pm.rewrite(x + 1))
        self.assertIs(pm.rewrite(x * 3), c(0))

    def test_rule_order_priority(self):
        pm = PatternMatcher([(UPat(Ops.ADD), lambda: c(1)), (UPat(Ops.ADD), lambda: c(2))])
        self.assertIs(pm.rewrite(x + 1), c(1))
        pm = PatternMatcher([(UPat(Ops.ADD), lambda: c(2)), (UPat(Ops.ADD), lambda: c(1))])
        self.assertIs(pm.rewrite(x + 1), c(2))

    def test_wildcard_order(self):
        pm = PatternMatcher([(UPat(Ops.MUL), lambda: c(1)), (UPat(), lambda: c(2)), (UPat(Ops.ADD), lambda: c(3))])
        self.assertIs(pm.rewrite(x + 1), c(2))     # the wildcard comes first for ADD
        self.assertIs(pm.rewrite(x * 2), c(1))
        self.assertIs(pm.rewrite(x), c(2))

    def test_none_falls_through(self):
        pm = PatternMatcher([(UPat(Ops.ADD), lambda: None), (UPat(Ops.ADD), lambda: c(7))])
        self.assertIs(pm.rewrite(x + 1), c(7))

    def test_same_node_is_no_rewrite(self):
        pm = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: a), (UPat(Ops.ADD), lambda: c(5))])
        self.assertIs(pm.rewrite(x + 1), c(5))

    def test_add_concatenates_in_order(self):
        pm = PatternMatcher([(UPat(Ops.ADD), lambda: c(1))]) + PatternMatcher([(UPat(Ops.ADD), lambda: c(2))])
        self.assertIs(pm.rewrite(x + 1), c(1))
        self.assertEqual(len(pm.rules), 2)

    def test_ctx_passing(self):
        seen = []
        def record(ctx, a):
            ctx.append(a)
            return None
        pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="a"), record)])
        graph_rewrite(x + y * 2, pm, ctx=seen)
        self.assertEqual(set(seen), {x, y})
        # a rule without ctx in its signature is called without it
        pm2 = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="a"), lambda a: c(a.arg[2]))])
        self.assertIs(graph_rewrite(x + y, pm2, ctx=object()), c(10) + c(10))

    def test_ctx_value_used(self):
        pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="a"), lambda ctx, a: c(ctx[a.arg[0]]))])
        self.assertIs(graph_rewrite(x * y, pm, ctx={"x": 3, "y": 4}), c(3) * c(4))

class TestGraphRewrite(unittest.TestCase):
    def test_fixed_point(self):
        # CONST k -> CONST k-1 until 0: one graph_rewrite runs the rule to the end
        pm = PatternMatcher([(UPat(Ops.CONST, name="k"), lambda k: c(k.arg - 1) if k.arg > 0 else None)])
        self.assertIs(graph_rewrite(c(5), pm), c(0))
        self.assertIs(graph_rewrite(x + 7, pm), x + 0)

    def test_result_is_rewritten_too(self):
        # a rule producing a node that another rule can simplify: the new node gets rewritten
        pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("k"))), lambda a, k: a + a if k.arg == 2 else None),
                             (UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a"))), lambda a: a.alu(Ops.SHL, c(1)))])
        self.assertIs(graph_rewrite(x * 2, pm), x.alu(Ops.SHL, c(1)))

    def test_bottom_up(self):
        order = []
        def visit(a):
            order.append(a.op)
            return None
        pm = PatternMatcher([(UPat(name="a"), visit)])
        graph_rewrite((x + 1) * 2, pm)
        self.assertEqual(order[-1], Ops.MUL)
        self.assertLess(order.index(Ops.ADD), order.index(Ops.MUL))
        self.assertLess(order.index(Ops.DEFINE_VAR), order.index(Ops.ADD))

    def test_memoized_once_per_node(self):
        calls = Counter()
        def count(a):
            calls[a] += 1
            return None
        pm = PatternMatcher([(UPat(name="a"), count)])
        shared = x * 3 + 1
        root = (shared * shared + shared) * (shared + 2)      # a DAG with heavy sharing
        graph_rewrite(root, pm)
        self.assertEqual(set(calls), set(root.toposort))
        self.assertEqual(max(calls.values()), 1)

    def test_memoized_with_rewrites(self):
        # with an actual rewrite, each distinct input node is still rewritten once
        calls = Counter()
        def twice(a):
            calls[a] += 1
            return c(a.arg * 2) if a.arg % 2 else None
        pm = PatternMatcher([(UPat(Ops.CONST, name="a"), twice)])
        shared = x + 3
        root = shared * shared + shared
        out = graph_rewrite(root, pm)
        self.assertIs(out, (x + 6) * (x + 6) + (x + 6))
        self.assertEqual(calls[c(3)], 1)
        self.assertEqual(calls[c(6)], 1)

    def test_deep_chain_no_recursion_limit(self):
        self.assertLess(sys.getrecursionlimit(), 5000 * 3)   # so the test means something
        e = x
        for _ in range(5000): e = e + 1
        pm = PatternMatcher([(UPat(Ops.CONST, name="k"), lambda k: c(2) if k.arg == 1 else None)])
        out = graph_rewrite(e, pm)
        depth, node = 0, out
        while node.op is Ops.ADD:
            self.assertIs(node.src[1], c(2))
            node, depth = node.src[0], depth + 1
        self.assertIs(node, x)
        self.assertEqual(depth, 5000)
        self.assertEqual(len(out.toposort), 5000 + 2)   # 5000 ADDs, x, and the shared const 2

    def test_deep_chain_symbolic(self):
        e = x
        for _ in range(5000): e = e + 1
        self.assertIs(graph_rewrite(e, symbolic), x + 5000)

    def test_replace_map(self):
        out = graph_rewrite(x + y, PatternMatcher([]), replace_map={y: c(4)})
        self.assertIs(out, x + 4)
        self.assertIs((x * y + y).substitute({y: x}), x * x + x)

    def test_graph_rewrite_map(self):
        pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="a"), lambda a: c(a.arg[2]))])
        a, b = graph_rewrite_map([x + 1, x * y], pm)
        self.assertIs(a, c(10) + c(1))
        self.assertIs(b, c(10) * c(10))

    def test_empty_matcher_is_identity(self):
        e = (x + 1) * y
        self.assertIs(graph_rewrite(e, PatternMatcher([])), e)

if __name__ == "__main__":
    unittest.main()
