"""A final line decoded as the continuation of a row's own free text (guided decoding).

A request with ``final`` (``final_line.FinalChoice``) is one row of the decode loop. It first
decodes freely with its own sampling settings until its free part ends: the first occurrence
of the marker's first word in any case ("verdict"), a stop string, max_new_tokens or EOS. The
row then switches to forced mode, without a new prefill:

- the target completions are those a two-request final choice scores: the text kept
  (``FinalChoice.body``) followed by the marker and each option, each tokenized as a whole
  (``choice.option_token_ids``); their shared first tokens are the forced part;
- the row keeps the longest run of its own tokens that begins the forced part (usually all
  it wrote before the marker, unless the tokenizer would spell the end differently), drops
  the rest from its KV cache (the columns are masked, ``DecodeBatch``) and is fed the forced
  tokens one per step, their logprobs recorded from the logits;
- then each step allows only the tokens that continue an option (a trie over the options'
  remaining tokens, EOS where an option is complete and another goes on) and picks among
  them: the most likely at temperature 0, else one drawn at the request's temperature with
  its seed (top_p does not apply); it stops when an option is complete.

The options are picked token by token, as vLLM's guided choice does, not by whole-option
score as ``choice.py`` does. The two rules agree whenever the options differ in a single token
after their shared part (" correct" and " incorrect" after "Verdict:" on SmolLM2): greedy
then picks the same option as a two-request final choice on the same free text, and a
sampled pick has the same distribution. For longer options, token by token can pick an
option whose first distinct token is likelier but whose whole score is lower.

The result covers kept text + marker + option: its token ids are the tokenization of its text,
exactly as a two-request final choice's, and every logprob is that of the model at that place
(the kept tokens' from the free decoding, the others from the forced steps).
"""

from __future__ import annotations

import re
from collections import deque

from transformers import PreTrainedTokenizerBase

from graphs.policies.choice import shared_length
from graphs.policies.final_line import FinalChoice


class FinalLineState:
    """Where one row is in its final line: free, forced (tokens left to feed) or picking an option."""

    def __init__(self, final: FinalChoice) -> None:
        self.final = final
        word = final.marker.split()[0].rstrip(":")
        self._word = re.compile(re.escape(word), re.IGNORECASE)
        self.window = 4 * len(word) + 2
        """Tokens of the tail to decode when looking for the marker (as for stop strings)."""
        self.free = True
        self.rewind = False
        """Set when the free part has just ended: the decode batch must drop the row's cache
        past its kept tokens and feed its last kept token again (then clears it)."""
        self.forced: deque[int] = deque()
        self._suffixes: list[list[int]] = []
        self._picked: list[int] = []
        self.text = ""
        """The final text once chosen: kept text + marker + option."""
        self.chosen: str | None = None

    def marker_in(self, tail: str) -> bool:
        return self._word.search(tail) is not None

    def start(self, tokenizer: PreTrainedTokenizerBase, ids: list[int], free_text: str) -> int:
        """End the free part (``ids``, whose text, cut at a stop string, is ``free_text``);
        returns how many of ``ids`` the row keeps."""
        self._prefix = self.final.prefix(self.final.body(free_text))
        targets = [
            list(tokenizer(self._prefix + option, add_special_tokens=False)["input_ids"])
            for option in self.final.options
        ]
        shared = shared_length(targets)
        keep = 0
        while keep < min(len(ids), shared) and ids[keep] == targets[0][keep]:
            keep += 1
        self.forced = deque(targets[0][keep:shared])
        self._suffixes = [t[shared:] for t in targets]
        self.free, self.rewind = False, True
        return keep

    def allowed(self, eos_ids: set[int]) -> list[int]:
        """Tokens that may come next: those continuing an option, and EOS where one is complete."""
        depth = len(self._picked)
        going_on = [s for s in self._suffixes if s[:depth] == self._picked]
        allowed = sorted({s[depth] for s in going_on if len(s) > depth})
        if any(len(s) == depth for s in going_on):
            allowed += sorted(eos_ids)
        return allowed

    def take(self, token: int) -> tuple[bool, bool]:
        """Record the token fed or picked: whether it belongs to the completion (an EOS that
        ends an option that another would continue does not), and whether an option is complete."""
        if self.forced:
            self.forced.popleft()
            return True, False
        depth = len(self._picked)
        if not any(len(s) > depth and s[depth] == token and s[:depth] == self._picked for s in self._suffixes):
            return False, self._finish()  # EOS, allowed only where an option is complete
        self._picked.append(token)
        longer = any(len(s) > depth + 1 and s[: depth + 1] == self._picked for s in self._suffixes)
        return True, not longer and self._finish()

    def _finish(self) -> bool:
        index = next(i for i, s in enumerate(self._suffixes) if s == self._picked)
        self.chosen = self.final.options[index]
        self.text = self._prefix + self.chosen
        return True
