"""Finding where two answers part, in bytes (a token may hold half a character), and the report."""

from studies.equality import NEAR_TIE_NATS, first_difference, parted_at, render_markdown

TOKENS = [b'{"', b"name", b'":"', "何".encode()[:2], "何".encode()[2:], b'"}']


def test_equal_answers_have_no_difference():
    assert first_difference(TOKENS, '{"name":"何"}'.encode()) is None


def test_first_differing_token_even_inside_a_character():
    assert first_difference(TOKENS, '{"name":"李"}'.encode()) == 3  # 李 and 何 share no first byte
    assert first_difference(TOKENS, '{"nam":"何"}'.encode()) == 1
    assert first_difference(TOKENS, '{"name":"何"}, "x"'.encode()) == len(TOKENS)  # patched ran on
    assert first_difference(TOKENS, b'{"') == 1  # patched stopped early


def test_answers_that_split_the_same_text_otherwise_part_where_the_split_began():
    """Stock wrote ``o`` then ``","`` where its second choice was ``ost``; the patched answer took ``ost``:
    byte by byte they part at ``","``, but the choice was made at ``o``, whose top-2 gap is the near-tie."""
    stock = [b'{"v":"C', b"o", b'","', b"t"]
    alternatives = [[b'{"v":"C'], [b"o", b"ost"], [b'","', b"d"], [b"t"]]
    assert first_difference(stock, b'{"v":"Costa Inc","t') == 2
    assert parted_at(stock, alternatives, b'{"v":"Costa Inc","t') == 1
    assert parted_at(stock, alternatives, b'{"v":"Cod","t') == 2  # no alternative before continues it: parted at 2
    assert parted_at(stock, alternatives, b'{"v":"Co","t') is None
    assert parted_at(stock, alternatives, b'x') == 0


def test_report_counts_near_ties():
    tie = {"request_id": "r1", "position": 3, "stock_top2": [["a", -0.70], ["b", -0.72]], "gap_nats": 0.02,
           "stock_text": "a", "patched_text": "b"}  # fmt: skip
    fault = {**tie, "request_id": "r2", "gap_nats": 5.0}
    results = {"prompts": 100, "started": "t", "machine": {"cpu": "c", "cores": 2, "git_commit": "g"},
               "rows": [{"arm": "dspark", "scenario": "s", "prompts": 100, "equal": 98, "differences": [tie, fault]}]}  # fmt: skip
    page = render_markdown(results)
    assert "| dspark | s | explicit | json_object | 1 | 100 | 98 | 98.0 | 2 | 1 | 5.0 | - | 0 |" in page and 0.02 < NEAR_TIE_NATS < 5.0
    assert "`r2` token 3" in page


def test_the_default_request_is_refused_where_stock_is_asked_for_a_schema(capsys):
    import pytest

    from studies.equality import main

    with pytest.raises(SystemExit) as stopped:
        main(["--mode", "json_schema"])  # the patch's default is json_object: it would differ by design
    assert stopped.value.code == 2 and "--requests default" in capsys.readouterr().err
