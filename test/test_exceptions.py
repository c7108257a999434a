"""Every row of the exception table in docs/api_fidelity.md: the call raises the listed type.

The table records, per bad call, the type tinygrad 0.14 raises and fusegrad's; fusegrad follows
tinygrad except where tinygrad asserts, fails by accident or silently computes, and then says why.
tinygrad isn't needed here: its column was filled in by running it, and this test checks ours."""
import builtins
import re
from pathlib import Path
import pytest
from fusegrad import Tensor, dtypes, nn
from fusegrad.nn import optim

TABLE_DOC = Path(__file__).resolve().parent.parent / "docs" / "api_fidelity.md"
SECTION = "## Exception types"
ROW = re.compile(r"^\| `(?P<call>[^`]+)` \| (?P<tinygrad>[\w ]+?) \| (?P<ours>\w+) \| (?P<why>.*?) ?\|$")

def _table_rows() -> list[dict]:
    """The rows of the exception table, parsed from the markdown."""
    text = TABLE_DOC.read_text()
    assert SECTION in text, f"{TABLE_DOC} has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [m.groupdict() for line in section.splitlines() if (m := ROW.match(line.strip()))]
    table_lines = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(table_lines), "a table row doesn't parse: " + str([l for l in table_lines if not ROW.match(l.strip())])
    return rows

ROWS = _table_rows()

def test_table_is_not_empty():
    assert len(ROWS) > 100

@pytest.mark.parametrize("row", ROWS, ids=[r["call"] for r in ROWS])
def test_exception_type(row):
    """The call raises exactly the fusegrad column's type (not a subclass or parent)."""
    expected = getattr(builtins, row["ours"])
    scope = {"Tensor": Tensor, "dtypes": dtypes, "nn": nn, "optim": optim}
    with pytest.raises(Exception) as info:
        result = eval(row["call"], scope)   # noqa: S307 - the calls are this repository's own table
        if isinstance(result, Tensor): result.realize()
    assert type(info.value) is expected, f"{row['call']} raised {type(info.value).__name__}: {info.value}"
    assert str(info.value), "the message must name the problem"

@pytest.mark.parametrize("row", ROWS, ids=[r["call"] for r in ROWS])
def test_difference_is_explained(row):
    """A row where fusegrad's type isn't tinygrad's says why (tinygrad asserts, fails by accident or computes)."""
    if row["tinygrad"] != row["ours"]: assert row["why"].strip(), f"{row['call']}: the types differ and the table doesn't say why"
