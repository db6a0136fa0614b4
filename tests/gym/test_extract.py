from proxycomp.gym_bridge import extract_code


def test_answer_block_wins_over_later_python_block():
    reply = "```answer\nA = 1\n```\ntext\n```python\nB = 2\n```\n"
    assert extract_code(reply) == "A = 1\n"


def test_last_python_block_wins_over_other_languages():
    reply = "```python\nfirst = 1\n```\n```python\nsecond = 2\n```\n```bash\nls\n```\n"
    assert extract_code(reply) == "second = 2\n"


def test_py_alias_counts_as_python():
    assert extract_code("```py\nx = 1\n```") == "x = 1\n"


def test_falls_back_to_last_fenced_block():
    assert extract_code("```\nx = 1\n```\n```text\ny = 2\n```") == "y = 2\n"


def test_longer_fence_can_hold_triple_backticks():
    reply = "````python\ns = '```'\nclass ModelNew: pass\n````"
    assert extract_code(reply) == "s = '```'\nclass ModelNew: pass\n"


def test_bare_code_with_model_new_and_prose_without_code():
    assert extract_code("class ModelNew:\n    pass\n") == "class ModelNew:\n    pass\n"
    assert extract_code("I could not write a kernel.") is None
