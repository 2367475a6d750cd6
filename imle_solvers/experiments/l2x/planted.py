"""A generated review corpus with *planted* explanations: the offline stand-in for BeerAdvocate.

The paper's learning-to-explain experiment (sec. 6) selects the k words of a beer review that
explain its rating for one aspect and measures *subset precision*: the share of selected words
that human annotators marked as describing that aspect. Here the annotation is exact by
construction. Every review is a sequence of token ids of three kinds:

* **aspect tokens** (the planted explanation): ``n_levels`` sentiment levels with ``synonyms``
  token ids each; level ``l`` carries the value ``l / (n_levels − 1)``. A review has an overall
  level ``b``; each aspect token takes it with probability ``agree`` (else a uniform level). The
  rating is the mean value of the review's aspect tokens, so they *determine* it.
* **confounders**: sentiment tokens of another aspect, with the same level structure. Each takes
  the review's level ``b`` with probability ``confound`` (aspects of a beer are correlated, as in
  the real data), else a uniform level. They carry information about the rating but are not the
  explanation.
* **neutral tokens** filling the rest.

The number of aspect tokens varies between reviews (``planted`` range), so an oracle selecting the
planted positions first reaches precision ``mean_i min(p_i, k) / k``:
[`PlantedCorpus.oracle_precision`][imle_solvers.experiments.l2x.planted.PlantedCorpus.oracle_precision].
"""

from __future__ import annotations

import dataclasses

import torch

from ..._checks import in_range, positive_int

__all__ = ["CorpusSpec", "PlantedCorpus", "make_corpus", "subset_precision"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusSpec:
    """Shape of the generated corpus.

    Attributes
    ----------
    length
        Tokens per review.
    planted
        ``(min, max)`` aspect tokens per review (inclusive, uniform).
    confounders
        ``(min, max)`` confounder tokens per review.
    n_levels
        Sentiment levels (for the aspect and for the confounders).
    synonyms
        Token ids per level.
    n_neutral
        Neutral token ids.
    agree
        Probability that an aspect token has the review's overall level.
    confound
        Probability that a confounder has the review's overall level.
    """

    length: int = 50
    planted: tuple[int, int] = (3, 12)
    confounders: tuple[int, int] = (3, 12)
    n_levels: int = 5
    synonyms: int = 8
    n_neutral: int = 200
    agree: float = 0.8
    confound: float = 0.5

    def __post_init__(self) -> None:
        for name in ("planted", "confounders"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"{name} must be (min, max) with 1 <= min <= max, got {(low, high)}")
        if self.planted[1] + self.confounders[1] > self.length:
            raise ValueError(
                f"length {self.length} cannot hold {self.planted[1]} + {self.confounders[1]} tokens"
            )
        if self.n_levels < 2 or self.synonyms < 1 or self.n_neutral < 1:
            raise ValueError("need n_levels >= 2, synonyms >= 1, n_neutral >= 1")
        for name in ("agree", "confound"):
            in_range(name, getattr(self, name), 0.0, 1.0, closed="[]")

    @property
    def vocab_size(self) -> int:
        """Neutral ids ``[0, n_neutral)``, then the aspect's, then the confounders' sentiment ids."""
        return self.n_neutral + 2 * self.n_levels * self.synonyms


@dataclasses.dataclass(frozen=True)
class PlantedCorpus:
    """Reviews, ratings and the planted explanation of each review.

    Attributes
    ----------
    tokens
        ``[N, length]`` token ids (int64).
    ratings
        ``[N]`` ratings in [0, 1]: the mean value of the review's aspect tokens.
    planted
        ``[N, length]`` bool, True at the aspect tokens (the ground-truth explanation).
    spec
        The generator's settings.
    """

    tokens: torch.Tensor
    ratings: torch.Tensor
    planted: torch.Tensor
    spec: CorpusSpec

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def subset(self, index: slice | torch.Tensor) -> PlantedCorpus:
        """The reviews at ``index``."""
        return PlantedCorpus(self.tokens[index], self.ratings[index], self.planted[index], self.spec)

    def oracle_precision(self, k: int) -> float:
        """Subset precision of a selector that picks planted tokens first: ``mean_i min(p_i, k) / k``."""
        counts = self.planted.sum(dim=-1).clamp_max(k)  # min(p_i, k)   [N]
        return float(counts.double().mean() / k)


def make_corpus(n: int, spec: CorpusSpec | None = None, seed: int = 0) -> PlantedCorpus:
    """Generate ``n`` reviews (deterministic given ``seed``).

    Parameters
    ----------
    n
        Number of reviews.
    spec
        The corpus' shape (default [`CorpusSpec`][imle_solvers.experiments.l2x.planted.CorpusSpec]`()`).
    seed
        Seed of the generator.
    """
    spec = CorpusSpec() if spec is None else spec
    n = positive_int("n", n)
    gen = torch.Generator().manual_seed(seed)
    length, levels, syn = spec.length, spec.n_levels, spec.synonyms

    def counts(low: int, high: int) -> torch.Tensor:
        return torch.randint(low, high + 1, (n,), generator=gen)  # [N]

    n_planted = counts(*spec.planted)
    n_confound = counts(*spec.confounders)
    slot = torch.arange(length).expand(n, length)  # slot j of a review                    [N, L]
    is_planted = slot < n_planted[:, None]  # slots [0, p) hold aspect tokens               [N, L]
    is_confound = (slot >= n_planted[:, None]) & (slot < (n_planted + n_confound)[:, None])

    overall = torch.randint(0, levels, (n, 1), generator=gen)  # the review's level b   [N, 1]
    level = torch.randint(0, levels, (n, length), generator=gen)  # a uniform level per slot [N, L]
    # aspect tokens take b with prob. `agree`, confounders with prob. `confound`
    p_b = torch.where(is_planted, spec.agree, torch.where(is_confound, spec.confound, 0.0))
    level = torch.where(torch.rand(n, length, generator=gen) < p_b, overall.expand(n, length), level)
    word = torch.randint(0, syn, (n, length), generator=gen)  # which synonym
    aspect_ids = spec.n_neutral + level * syn + word
    confound_ids = spec.n_neutral + levels * syn + level * syn + word
    neutral_ids = torch.randint(0, spec.n_neutral, (n, length), generator=gen)
    tokens = torch.where(is_planted, aspect_ids, torch.where(is_confound, confound_ids, neutral_ids))

    value = level.double() / (levels - 1)  # v = l / (levels − 1)   [N, L]
    ratings = (value * is_planted).sum(dim=-1) / n_planted  # mean value of the aspect tokens   [N]

    perm = torch.rand(n, length, generator=gen).argsort(dim=-1)  # shuffle positions
    return PlantedCorpus(
        tokens=tokens.gather(1, perm), ratings=ratings.float(), planted=is_planted.gather(1, perm), spec=spec
    )


def subset_precision(mask: torch.Tensor, planted: torch.Tensor) -> float:
    """Mean over reviews of ``|selected ∩ planted| / |selected|`` for a ``[N, L]`` 0/1 ``mask``."""
    selected = mask > 0.5
    hits = (selected & planted).sum(dim=-1).double()
    return float((hits / selected.sum(dim=-1).clamp_min(1)).mean())
