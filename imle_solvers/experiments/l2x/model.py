"""The networks of learning to explain: the explainer (scores per position) and the predictor."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Explainer", "Predictor"]


class Explainer(nn.Module):
    """Scores ``[B, L]`` for ``[B, L]`` token ids: the L2X explainer (local + global convolutions).

    Parameters
    ----------
    vocab
        Number of token ids.
    emb
        Embedding width.
    filters
        Channels of the convolutions.
    hidden
        Width of the global dense layer and of the head.

    References
    ----------
    Chen, Song, Wainwright & Jordan, "Learning to Explain: An Information-Theoretic Perspective on Model
    Interpretation", ICML 2018, <https://arxiv.org/abs/1802.07814>.
    """

    def __init__(self, vocab: int, emb: int = 32, filters: int = 64, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(0.2)
        self.conv = nn.Conv1d(emb, filters, 3, padding=1)
        self.global_dense = nn.Linear(filters, hidden)
        self.local = nn.Sequential(
            nn.Conv1d(filters, filters, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(filters, filters, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Dropout(0.2), nn.Conv1d(filters + hidden, hidden, 1), nn.ReLU(), nn.Conv1d(hidden, 1, 1)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(self.drop(self.embed(tokens)).transpose(1, 2)))  # [B, F, L]
        glob = torch.relu(self.global_dense(h.max(dim=-1).values))  # global max-pool → dense   [B, H]
        both = torch.cat([self.local(h), glob[:, :, None].expand(-1, -1, h.shape[-1])], dim=1)  # [B, F+H, L]
        return self.head(both).squeeze(1)  # θ: one score per position   [B, L]


class Predictor(nn.Module):
    """Rating in (0, 1) from the selected tokens: mean of their embeddings → dense → sigmoid.

    Parameters
    ----------
    vocab
        Number of token ids.
    k
        Subset size (the mean divides by it).
    emb
        Embedding width.
    hidden
        Width of the dense layer.
    """

    def __init__(self, vocab: int, k: int, emb: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.k = k
        self.embed = nn.Embedding(vocab, emb)
        self.out = nn.Sequential(nn.Linear(emb, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = (self.embed(tokens) * mask[..., None]).sum(dim=1) / self.k  # mean of selected   [B, E]
        return torch.sigmoid(self.out(pooled)).squeeze(-1)  # [B]
