"""A histogram for one thread's hot path: plain counters, no locks, read at scrape time.

prometheus_client's `Histogram.observe` takes two locks per observation (the sum and the
bucket, each a `threading.Lock` around a float). The API latency histogram is observed once
per request, always on the event loop's thread, and scraped on that same thread (`GET
/metrics` is a handler), so the locks guard nothing there and cost ~1.5 us of every request.
`LoopHistogram` keeps per-label-set bucket counts and a sum in a plain list and hands them
to the registry as a `HistogramMetricFamily` when scraped: the same `_bucket` (cumulative,
`le` as prometheus_client writes it), `_count` and `_sum` samples.

Only for metrics observed from a single thread; the label sets must be bounded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import INF, floatToGoString


class LoopChild:
    """One label set's counts: `counts[i]` observations fell in bucket i (not cumulative;
    the last bucket is +Inf) and `total` is their sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0

    def observe(self, amount: float) -> None:
        """Count `amount` in the first bucket whose upper bound is >= it (Prometheus' `le`)."""
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.total += amount


class LoopHistogram(Collector):
    """A labelled histogram whose children are observed from one thread (see the module)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != INF:
            bounds.append(INF)
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(bounds)
        self._les = [floatToGoString(b) for b in self.bounds]
        self._children: dict[tuple[str, ...], LoopChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> LoopChild:
        """The child of one label set, created on first use (never removed)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = LoopChild(self.bounds)
        return child

    def describe(self) -> Iterator[HistogramMetricFamily]:
        """The family without samples, so registering checks the name without a scrape."""
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            running = 0
            cumulative: list[tuple[str, float]] = []
            for le, n in zip(self._les, list(child.counts), strict=True):
                running += n
                cumulative.append((le, running))
            family.add_metric(values, cumulative, child.total)
        yield family
