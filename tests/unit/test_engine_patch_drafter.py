"""The structure drafter's pieces, on a small hand-made vocabulary."""

import numpy as np

from dspark_serve.drafter import (
    DELIMITER,
    OPENS_KEY_Q,
    OPENS_STRING,
    PUNCT,
    WORD,
    StructureMemory,
    copy_candidates,
    draft_length,
    propose_one,
    token_kind,
)

# id -> text: a JSON-ish vocabulary
VOCAB = ['{"', "name", '":"', '","', "city", '"}', "Ann", " Lee", "Bob", " Kay", "Oslo", "Rome", ", ", "; ", "Name:", "x"]
ID = {text: i for i, text in enumerate(VOCAB)}
KINDS = np.array([token_kind(t) for t in VOCAB], dtype=np.int8)


def _ids(*texts):
    return np.array([ID[t] for t in texts], dtype=np.int32)


def test_token_kinds():
    assert token_kind('{"') == OPENS_KEY_Q and token_kind('":"') == OPENS_STRING and token_kind('"}') != WORD
    assert token_kind(", ") == PUNCT and token_kind("; ") == DELIMITER and token_kind("Ann") == WORD


def test_copy_takes_what_followed_the_longest_earlier_match():
    tokens = np.array([7, 1, 2, 3, 40, 41, 42, 9, 1, 2, 3], dtype=np.int32)
    assert copy_candidates(tokens, 3) == [40, 41, 42]
    assert copy_candidates(np.array([5, 6, 7], dtype=np.int32), 3) == []


def _answer(name, surname, city):
    return ['{"', "name", '":"', name, surname, '","', "city", '":"', city, '"}']


def test_memory_learns_the_skeleton_not_the_values():
    memory = StructureMemory(KINDS)
    for name, surname, city in (("Ann", " Lee", "Oslo"), ("Bob", " Kay", "Rome"), ("Ann", " Kay", "Oslo")):
        memory.learn(_ids(*_answer(name, surname, city)), 0)
    # after any name value, the skeleton continues with ',"city":"' ...
    after_name = memory.skeleton(_ids('{"', "name", '":"', "Bob", " Lee"))
    assert memory.predict(after_name) == ID['","']
    # ... but the value itself is never guessed from memory
    assert memory.predict(memory.skeleton(_ids('{"', "name", '":"'))) is None


def test_a_comma_inside_a_string_value_is_part_of_the_value():
    memory = StructureMemory(KINDS)
    skeleton = memory.skeleton(_ids('{"', "city", '":"', "Oslo", ", ", "Rome"))
    assert skeleton.inside_value and skeleton.items[-1] == -1 and ID[", "] not in skeleton.items


def test_draft_copies_the_value_from_the_prompt_then_closes_it_from_memory():
    memory = StructureMemory(KINDS)
    prompt = ["Name:", "Bob", " Lee", "; ", "x"]
    for name, surname, city in (("Ann", " Lee", "Oslo"), ("Bob", " Kay", "Rome"), ("Ann", " Kay", "Rome")):
        memory.learn(_ids(*prompt, *_answer(name, surname, city)), len(prompt))
    tokens = _ids(*prompt, '{"', "name", '":"', "Bob")
    # " Lee" copied from the prompt; the prompt's "; " ends the field; memory closes the value
    assert propose_one(tokens, 5, memory) == [ID[" Lee"], ID['","'], ID["city"], ID['":"']]


def test_draft_length_shrinks_with_the_batch():
    assert draft_length(8, 1, budget=64) == 8
    assert draft_length(8, 8, budget=64) == 7
    assert draft_length(8, 64, budget=64) == 0


def test_text_copy_finds_a_value_whose_first_token_differs_from_the_prompts():
    from dspark_serve.drafter import TextCopy
    from models.tokenizer import load_tokenizer

    tok = load_tokenizer("models/tiny-json")
    prompt = tok.encode("Recipient: Joshua Bailey; Address: 12 Elm Road", add_special_tokens=False)
    opened = tok.encode('{"name":"', add_special_tokens=False)
    value = tok.encode("Joshua", add_special_tokens=False)
    assert value[0] not in prompt  # "Joshua" here, " Joshua" in the prompt: id matching cannot find it
    tokens = np.array(prompt + opened + value, dtype=np.int32)
    assert tok.decode(TextCopy(tok)(tokens, len(value), 5)) == " Bailey"  # and stops at the field's ";"


def test_no_draft_for_plain_text():
    memory = StructureMemory(KINDS)
    prompt = ["Name:", "Bob", " Lee", "; ", "x", "Name:", "Bob"]  # a repeat a copy would draft from, but no JSON
    assert propose_one(_ids(*prompt), 5, memory) == []
