"""Every public Tensor method and property has a docstring with a small example, and the examples run."""
import doctest, inspect
import pytest
from fusegrad import Tensor, dtypes

def _public_members() -> dict[str, object]:
    """name -> the function (or property getter) for every public callable attribute of Tensor."""
    members = {}
    for name in dir(Tensor):
        if name.startswith("_"): continue
        attribute = inspect.getattr_static(Tensor, name)
        function = attribute.fget if isinstance(attribute, property) else getattr(attribute, "__func__", attribute)
        if callable(function): members[name] = function
    return members

def test_every_public_method_has_a_docstring_with_an_example():
    missing = sorted(name for name, function in _public_members().items() if not (function.__doc__ or "").strip())
    without_example = sorted(name for name, function in _public_members().items()
                             if (function.__doc__ or "").strip() and ">>>" not in function.__doc__)
    assert not missing, f"Tensor members without a docstring: {missing}"
    assert not without_example, f"Tensor members whose docstring has no >>> example: {without_example}"

def _doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(recurse=False)
    tests = []
    for name, function in sorted(_public_members().items()):
        tests += [t for t in finder.find(function, f"Tensor.{name}", globs={"Tensor": Tensor, "dtypes": dtypes}) if t.examples]
    return tests

@pytest.mark.parametrize("test", _doctests(), ids=lambda t: t.name)
def test_docstring_example_runs(test: doctest.DocTest):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures = []
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
