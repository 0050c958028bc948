"""IPython frames rewritten line by line give what the whole-text pattern gives."""

from __future__ import annotations

import random

from service.diagnosis import normalize


def test_frames_found_from_their_words_match_the_whole_text_rewrite() -> None:
    rng = random.Random(11)
    bits = [
        "File ~/envs/a/vllm/worker/worker.py:123, in Worker.load_model(self)",
        "File b.py:3, in f",
        'File "c.py", line 3, in g',
        "x File d.py:9, in h()",
        "File e.py:1, in k(",
        "  ",
        ">",
        ".py:",
        "\n",
        "\t",
    ]
    for _ in range(2000):
        text = "".join(rng.choice(bits) for _ in range(rng.randint(0, 12)))
        whole = normalize._IPYTHON_FRAME.sub(normalize._PYTHON_FRAME, text)
        assert normalize._python_frames(text) == whole, repr(text)
