"""Continuous batching: the serving loop's schedule of prefill and decode steps (docs/serving.md "The loop").

Iteration by iteration, from the first arrival:

1. **Admit**, first come first served: the oldest waiting request joins while the running requests are fewer
   than ``max_batch`` and the KV cache can hold its whole prompt and output beside what the running ones
   reserved (no request is ever evicted).  A request that needs more than the whole cache is refused on
   arrival and counted.
2. **Step.** A request admitted and not yet prefilled is prefilled alone (one prompt per step, the oldest
   first: prefills go before decodes, as vLLM's default scheduler orders them); its prefill makes its first
   token.  Otherwise one decode step makes the next token of every prefilled request; each attends to its
   prompt and the tokens it made so far.
3. With nothing to run, the loop waits for the next arrival.

A step's time is ``costs.prefill_ns`` / ``costs.decode_ns`` of its shape (kbfast.serving.costs: a decode step at
its users' mean KV length, both in whole granules).  The loop is plain Python over steps: a run of 10^4
steps takes well under a second besides the costs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.serving.costs import decode_shape, prefill_shape
from kbfast.serving.requests import Requests

STEP_COLUMNS = ("start_ns", "end_ns", "kind", "batch", "tokens", "kv_tokens", "reserved_tokens", "waiting")


@dataclass(frozen=True)
class Schedule:
    """A serving run's steps (``STEP_COLUMNS``: each step's span, kind, users, its shape's tokens, the KV tokens
    held and reserved at its end, the requests waiting at its start) and per request its admission, first
    token and finish (ns; NaN for a refused request)."""

    steps: pd.DataFrame
    requests: Requests
    admitted_ns: np.ndarray
    first_token_ns: np.ndarray
    finish_ns: np.ndarray
    refused: np.ndarray          # bool: needs more KV than the whole cache
    capacity_tokens: int
    max_batch: int


def simulate(requests: Requests, costs, max_batch: int, capacity_tokens: int, granule: int) -> Schedule:
    """The schedule of ``requests`` (module docstring) with step costs from ``costs`` (``decode_ns(batch, kv)``,
    ``prefill_ns(seq)``), at most ``max_batch`` running requests and ``capacity_tokens`` of KV cache."""
    n = len(requests)
    arrival, prompt, output = requests.arrival_ns, requests.prompt, requests.output
    need = prompt + output
    refused = need > capacity_tokens
    admitted, first, finish = (np.full(n, np.nan) for _ in range(3))
    made = np.zeros(n, np.int64)                       # tokens made so far
    waiting: deque[int] = deque()
    to_prefill: deque[int] = deque()
    decoding: list[int] = []
    reserved = 0
    nxt = 0                                            # the next request to arrive
    now = float(arrival[0]) if n else 0.0
    rows = []
    while nxt < n or waiting or to_prefill or decoding:
        while nxt < n and arrival[nxt] <= now:
            if not refused[nxt]:
                waiting.append(nxt)
            nxt += 1
        while (waiting and len(to_prefill) + len(decoding) < max_batch
               and reserved + need[waiting[0]] <= capacity_tokens):
            r = waiting.popleft()
            admitted[r] = now
            reserved += int(need[r])
            to_prefill.append(r)
        if to_prefill:
            r = to_prefill.popleft()
            shape = prefill_shape(int(prompt[r]), granule)
            took = costs.prefill_ns(shape.seq)
            kind, batch, tokens = "prefill", 1, shape.seq
            made[r] = 1
            first[r] = now + took
            done = [r] if output[r] == 1 else []
            if not done:
                decoding.append(r)
        elif decoding:
            users = np.array(decoding)
            shape = decode_shape(len(users), float((prompt[users] + made[users]).mean()), granule)
            took = costs.decode_ns(shape.batch, shape.kv_len)
            kind, batch, tokens = "decode", shape.batch, shape.kv_len
            made[users] += 1
            done = users[made[users] == output[users]].tolist()
            decoding = [r for r in decoding if made[r] < output[r]]
        else:
            now = float(arrival[nxt])                  # idle until the next arrival
            continue
        end = now + took
        for r in done:
            finish[r] = end
            reserved -= int(need[r])
        held = int(sum(int(prompt[r] + made[r]) for r in decoding))
        rows.append((now, end, kind, batch, tokens, held, reserved, len(waiting)))
        now = end
    steps = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    return Schedule(steps, requests, admitted, first, finish, refused, capacity_tokens, max_batch)
