"""The suite's own hooks (tests/conftest.py): the order and the part of the suite a
run asks for, applied to a suite of its own (pytester)."""

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parents[1] / "conftest.py").read_text()
TESTS = "\n".join(f"def test_{i}():\n    print('ran {i}')\n" for i in range(7))


def _ran(pytester, monkeypatch, **env):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_seven=TESTS)
    for name in ("GRADPIPE_TEST_ORDER", "GRADPIPE_TEST_SHARD"):  # (this run's own, if any)
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest("-p", "no:xdist", "-p", "no:randomly", "-v")
    ran = [int(line.split("::test_")[1].split()[0]) for line in result.outlines if "PASSED" in line]
    return result, ran


def test_parts_of_the_suite_cover_it_once(pytester, monkeypatch):
    seen = []
    for k in (1, 2, 3):
        result, ran = _ran(pytester, monkeypatch, GRADPIPE_TEST_SHARD=f"{k}/3")
        assert ran == list(range(k - 1, 7, 3))
        result.assert_outcomes(passed=len(ran), deselected=7 - len(ran))
        seen += ran
    assert sorted(seen) == list(range(7))


def test_a_part_that_is_none_is_refused(pytester, monkeypatch):
    result, _ = _ran(pytester, monkeypatch, GRADPIPE_TEST_SHARD="4/3")
    assert "is not a part" in "\n".join(result.errlines + result.outlines)
    assert result.ret != 0


def test_the_order_asked_for(pytester, monkeypatch):
    _, ran = _ran(pytester, monkeypatch, GRADPIPE_TEST_ORDER="reversed")
    assert ran == list(range(6, -1, -1))
    _, once = _ran(pytester, monkeypatch, GRADPIPE_TEST_ORDER="shuffled:3")
    _, again = _ran(pytester, monkeypatch, GRADPIPE_TEST_ORDER="shuffled:3")
    assert once == again and sorted(once) == list(range(7)) and once != list(range(7))
