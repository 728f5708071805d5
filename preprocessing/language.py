"""Which language a short text is in, offline: lingua's detector (its n-gram models are compiled into the wheel).

The rule an answer is judged by (docs/tagging-options.md says it to users):

- a text with fewer than ``MIN_LETTERS`` letters is not judged: no detector tells "car" from "cár" or "ok";
- a text is in another language when the detector's most likely language is not the asked one and gives the
  asked one a confidence below ``MIN_ASKED_CONFIDENCE`` (single words are often shared: "portrait", "hotel");
- a language the detector does not know (``language_of`` is None) is not judged at all.

The detector knows the asked language and ``COMMON`` (the languages photo libraries are mostly tagged in, and
English, which small models fall back to); it is built once per process and asked language, on first use, and
loads its models then (a few seconds, a few hundred MB for the whole set).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the detector is imported on first use: loading it is not free
    from lingua import Language, LanguageDetector

__all__ = [
    "COMMON",
    "MIN_ASKED_CONFIDENCE",
    "MIN_LETTERS",
    "in_other_language",
    "judged",
    "language_of",
    "name_of",
    "others",
]

MIN_LETTERS = 4
MIN_ASKED_CONFIDENCE = 0.1
# ISO 639-1 codes as lingua names them (Norwegian Bokmål is "nb").
COMMON = (
    "en", "de", "fr", "es", "it", "pt", "nl", "sv", "da", "nb", "fi", "pl", "cs", "ru", "uk", "tr", "ja", "zh", "ko",
    "ar",
)  # fmt: skip
_ALIASES = {"no": "nb", "nn": "nb"}


def language_of(asked: str) -> Language | None:
    """The language a tagging option names: an ISO 639-1 code, with or without a region ("pt-BR"), or an English
    name ("German"); None when the detector does not know it."""
    from lingua import IsoCode639_1, Language

    text = asked.strip().lower().replace("_", "-")
    code = _ALIASES.get(text.split("-")[0], text.split("-")[0])
    if len(code) == 2:
        try:
            return Language.from_iso_code_639_1(IsoCode639_1.from_str(code))
        except ValueError:
            return None
    by_name = {lang.name.lower(): lang for lang in Language.all()}
    return by_name.get(text)


def name_of(language: Language) -> str:
    """ "German", as a prompt names it."""
    return language.name.capitalize()


@functools.lru_cache(maxsize=4)
def _detector(asked: Language) -> LanguageDetector:
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    known = {Language.from_iso_code_639_1(IsoCode639_1.from_str(code)) for code in COMMON} | {asked}
    return LanguageDetectorBuilder.from_languages(*known).build()


def judged(text: str) -> bool:
    """Whether ``text`` is long enough to be judged (``MIN_LETTERS``)."""
    return sum(c.isalpha() for c in text) >= MIN_LETTERS


def in_other_language(text: str, asked: Language) -> bool:
    """Whether ``text`` is judged to be in a language other than ``asked`` (False when it is not judged)."""
    if not judged(text):
        return False
    detector = _detector(asked)
    likely = detector.detect_language_of(text)
    if likely is None or likely == asked:
        return False
    return detector.compute_language_confidence(text, asked) < MIN_ASKED_CONFIDENCE


def others(texts: Iterable[str], asked: Language) -> list[str]:
    """The texts judged to be in another language, in their order."""
    return [t for t in texts if in_other_language(t, asked)]
