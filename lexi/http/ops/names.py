"""The resident model's HTTP names: the first alias is its public id, the rest are exact-match aliases."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lexi.http.errors import model_not_loaded


@dataclass(frozen=True, slots=True)
class ModelNames:
    public_id: str
    aliases: tuple[str, ...] = ()  # accepted as exact matches and listed separately

    @classmethod
    def build(cls, aliases: tuple[str, ...], model_path: Path) -> ModelNames:
        """No alias: the file's name without its extension is the id (what the loader reports)."""
        if aliases:
            return cls(aliases[0], tuple(aliases[1:]))
        return cls(Path(model_path).stem)

    @property
    def all(self) -> tuple[str, ...]:
        return (self.public_id, *self.aliases)

    def resolve(self, requested: object) -> str:
        """The name a request asked for (None = the resident model); anything undeclared is a 400."""
        if requested is None:
            return self.public_id
        if isinstance(requested, str) and requested in self.all:
            return requested
        raise model_not_loaded(str(requested))
