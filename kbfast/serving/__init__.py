"""Serving: a model under a request load, with continuous batching (docs/serving.md).

:func:`serve` puts the parts together: the requests (kbfast.serving.requests), what the KV cache may hold
and the step costs (kbfast.serving.costs), the loop (kbfast.serving.scheduler) and its figures
(kbfast.serving.report).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kbfast.config.models import Transformer
from kbfast.errors import KbfastError
from kbfast.serving.costs import DirectCosts, InterpolatedCosts, Memory, StepOptions, memory
from kbfast.serving.requests import Requests
from kbfast.serving.scheduler import Schedule, simulate
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router


@dataclass(frozen=True)
class ServeResult:
    """A serving run: its schedule, the KV cache it had, and the step costs it used (interpolated, with their
    checks, or direct)."""

    schedule: Schedule
    memory: Memory
    costs: InterpolatedCosts | DirectCosts
    mode: str                      # fast (interpolated) or exact (every step shape replayed)


def serve(t: Tables, router: Router, opts: StepOptions, requests: Requests, max_batch: int, mode: str = "fast",
          progress: Callable[[int, int], None] | None = None, jobs: int = 1) -> ServeResult:
    """Serve ``requests`` with at most ``max_batch`` running: on the fast path the step costs are interpolated
    from grids covering the run and checked (kbfast.serving.costs.InterpolatedCosts); ``mode`` exact evaluates
    every distinct step shape exactly.  ``progress(done, planned)``: after each step shape evaluated; ``jobs``:
    processes that evaluate them."""
    if not isinstance(opts.model, Transformer):
        raise KbfastError(f"{opts.model.name} is of kind {opts.model.kind}: serving runs transformer models\n"
                          "  hint: use llama3_70b, llama32_1b, gpt3_175b or a transformer YAML")
    if not len(requests):
        raise KbfastError("no request arrives in the run\n  hint: raise --rate or --duration")
    if max_batch < 1:
        raise KbfastError(f"--max-batch {max_batch}: at least 1 request must run at a time")
    mem = memory(t, opts, max_batch, int(requests.prompt.max()))
    fits = requests.prompt + requests.output <= mem.capacity_tokens     # the others are refused on arrival
    if not fits.any():
        need = int((requests.prompt + requests.output).min())
        raise KbfastError(f"no request fits the KV cache: it holds {mem.capacity_tokens:,} tokens, the smallest "
                          f"request needs {need:,} (prompt and output)\n  hint: shorter --prompt-len or "
                          "--output-len, a smaller --max-batch, more SIPs (--set sips.count=N) or layout tp_pes")
    prompt, whole = requests.prompt[fits], (requests.prompt + requests.output)[fits]
    with DirectCosts(t, router, opts, mode, progress, jobs) as direct:
        if mode == "exact":
            costs = direct
        else:         # the grids cover the requests that are served
            costs = InterpolatedCosts.build(direct, min(max_batch, len(prompt)), (int(prompt.min()) + 1,
                                            int(whole.max())), (int(prompt.min()), int(prompt.max())), mem.granule)
        return ServeResult(simulate(requests, costs, max_batch, mem.capacity_tokens, mem.granule), mem, costs, mode)
