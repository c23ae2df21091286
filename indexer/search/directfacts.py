"""Direct-fact shapes for the auto-mode gate: parse a question, then test one record against it.

    question, reason = classify_question("Where does Priya live?")
    record_value(question, "Priya lives in Rotterdam.")      -> "rotterdam"
    record_value(question, "Sam said Priya lives in Delft.")  -> None   (reported speech)

Both sides are reduced to word tokens and compared on *keys* (subject, property, event, verb),
never on similarity: a record is admitted only when its own sentence binds the asked subject and
property to a value. The parser is a handful of positional rules over a token list, with no
regular expression that could backtrack, and it refuses long input before tokenising it.
See `indexer/search/autogate.py` for the shapes and what abstains.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from memvault.indexer.search.routing import normalize_query

MAX_QUESTION_CHARS = 300
#: a record longer than this is not a canonical one-fact sentence
MAX_FACT_CHARS = 1024
MAX_SUBJECT_WORDS, MAX_PROPERTY_WORDS, MAX_EVENT_WORDS, MAX_VALUE_WORDS = 4, 5, 6, 24

POSSESSIVE, CHOICE, EVENT_TIME, LOCATION = "possessive_property", "direct_choice", "event_time", "work_live_location"


@dataclass(frozen=True)
class Question:
    shape: str
    subject: tuple[str, ...] = ()
    prop: tuple[str, ...] = ()  # the property (choice: sorted bag of its words)
    detail: str = ""  # event: when | time | date; location: live | work


# --- vocabulary ---------------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


COORDINATION = _words("and or nor either neither both & plus versus vs")
COORDINATION_PHRASES = ("as well as", "along with", "together with")
REPORTED = _words(
    "said say says told tell tells mentioned mentions reported reports claimed claims claim think thinks "
    "thought believe believes believed heard hears stated states asked asks suggested suggests proposed "
    "proposes recommended recommends according announced wrote writes explained confirmed confirms denied "
    "guessed guesses assumed assumes reckons insisted noted remembered recalls recalled feels felt wants "
    "wanted hopes hoped expects expected agreed agrees argued supposedly reportedly allegedly rumoured rumored"
)
DITRANSITIVE = _words(
    "gave give gives given sent send sends showed shown handed lent lend lends brought bring brings "
    "emailed texted mailed forwarded promised offered awarded granted taught sold owes owed"
)
NEGATION = _words(
    "not no never none nobody nothing nowhere without unknown unsure uncertain unclear undecided "
    "undetermined unconfirmed tbd tba tbc n/a maybe perhaps possibly probably likely might could would "
    "should tentative tentatively provisional provisionally formerly former previously anymore until "
    "till cancelled canceled postponed forgot forgotten ex-"
)
NEGATION_PHRASES = ("no longer", "used to", "isn't sure", "not sure", "to be decided", "to be confirmed")
SUBORDINATE = _words(
    "because although though since which that who whom whose where when whenever wherever if unless "
    "while whilst whereas after before whether even but however except instead otherwise so what why how"
)
SUBORDINATE_PHRASES = ("rather than", "in case", "as if", "as though", "so that", "provided that")
ACTOR = _words("who whom whose")
RELATIONSHIP = _words(
    "manager managers boss supervisor lead wife husband partner spouse girlfriend boyfriend mother father "
    "mom mum dad parent parents sister brother sibling siblings son daughter child children kid kids friend "
    "friends colleague colleagues coworker coworkers teammate teammates report reports mentor mentee "
    "neighbour neighbor roommate cousin uncle aunt grandmother grandfather fiance fiancee assistant "
    "owner successor predecessor"
)
PRONOUNS = _words(
    "i me my mine you your yours he him his she her hers it its we us our ours they them their theirs "
    "this that these those someone somebody everyone everybody anyone anybody one"
)
DETERMINERS = _words("the a an our my your his her their its")
COPULA = _words("is are was were")
AUX = _words("did does do has have had")

# --- morphology: every form of every verb the gate reads ---------------------------------------
# Questions are parsed against this table, never by cutting letters off a word: a form that is
# not in it is not understood, and the gate abstains ("Where is Priya living?" once crashed on a
# sliced "liv").
BASE, THIRD_PERSON, PAST, PARTICIPLE, PROGRESSIVE = "base", "third_person", "past", "participle", "progressive"
TENSES = (BASE, THIRD_PERSON, PAST, PARTICIPLE, PROGRESSIVE)
VERB_FORMS: dict[str, tuple[str, str, str, str, str]] = {
    # lemma: (base, third person singular, past, past participle, progressive)
    "live": ("live", "lives", "lived", "lived", "living"),
    "work": ("work", "works", "worked", "worked", "working"),
    "choose": ("choose", "chooses", "chose", "chosen", "choosing"),
    "select": ("select", "selects", "selected", "selected", "selecting"),
    "pick": ("pick", "picks", "picked", "picked", "picking"),
    "start": ("start", "starts", "started", "started", "starting"),
    "begin": ("begin", "begins", "began", "begun", "beginning"),
    "happen": ("happen", "happens", "happened", "happened", "happening"),
}
#: form -> (lemma, the tenses it can be: "lived" is both past and participle)
VERB_FORM_INDEX: dict[str, tuple[str, frozenset[str]]] = {}
for _lemma_name, _forms in VERB_FORMS.items():
    for _tense, _form in zip(TENSES, _forms, strict=True):
        _known = VERB_FORM_INDEX.get(_form, (_lemma_name, frozenset()))[1]
        VERB_FORM_INDEX[_form] = (_lemma_name, _known | {_tense})
#: which verb form each auxiliary takes: "does X live", "is X living", "has X lived", "will X live"
AUX_TAKES = {
    "do": BASE,
    "does": BASE,
    "did": BASE,
    "will": BASE,
    "is": PROGRESSIVE,
    "are": PROGRESSIVE,
    "was": PROGRESSIVE,
    "were": PROGRESSIVE,
    "has": PARTICIPLE,
    "have": PARTICIPLE,
    "had": PARTICIPLE,
}


def verb_forms(*lemmas: str) -> frozenset[str]:
    return frozenset(form for lemma in lemmas for form in VERB_FORMS[lemma])


def verb_after_aux(aux: str, word: str, lemmas: frozenset[str] | tuple[str, ...]) -> str | None:
    """The lemma of `word` when it is one of `lemmas` in the form `aux` takes, else None."""
    lemma, tenses = VERB_FORM_INDEX.get(word, ("", frozenset()))
    return lemma if lemma in lemmas and AUX_TAKES.get(aux) in tenses else None


CHOICE_LEMMAS, LOCATION_LEMMAS, EVENT_LEMMAS = (
    ("choose", "select", "pick"),
    ("live", "work"),
    ("start", "begin", "happen"),
)
CHOICE_VERBS = verb_forms(*CHOICE_LEMMAS)
LIVE_VERBS = {lemma: verb_forms(lemma) for lemma in LOCATION_LEMMAS}
PREPOSITIONS = {"live": _words("in at on near"), "work": _words("at for in on")}
EVENT_VERBS = verb_forms(*EVENT_LEMMAS)
SCHEDULED = _words("scheduled planned set booked due fixed")
_ALIASES = {
    "colour": "color",
    "favourite": "favorite",
    "centre": "center",
    "organisation": "organization",
    "telephone": "phone",
    "e-mail": "email",
    "bday": "birthday",
}

_WEEKDAYS = _words(
    "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun"
)
_MONTHS = _words(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
)
_DATE_RE = re.compile(
    r"\d{1,2}(?:st|nd|rd|th)|\d{4}-\d{2}-\d{2}(?:t[\d:]{5,8}z?)?|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}|(?:19|20)\d{2}"
)
_TIME_RE = re.compile(r"\d{1,2}(?::\d{2})?(?:am|pm|h)|\d{1,2}:\d{2}(?:-\d{1,2}:\d{2})?|noon|midday|midnight")
_DATE_FILLER = _words(
    "on at for the of from to in - – — am pm a.m. p.m. first second third fourth fifth every morning "
    "afternoon evening night sharp local time utc gmt cet cest bst ist est edt cst cdt mst mdt pst pdt "
    "jst aest aedt o'clock"
)
_ZONE_RE = re.compile(r"[a-z]+/[a-z_]+|utc[+-]\d{1,2}(?::\d{2})?|\d{1,2}")

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "`": "'"})
_BLOCK_ID_RE = re.compile(r"\s\^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
#: a second sentence, a question, a list or a "Speaker: ..." label inside a record
_SENTENCE_BREAK_RE = re.compile(r"[!?;\n]|[.:](?=\s)")
_STRIP = ',"()[]{}*_'


# --- questions ----------------------------------------------------------------------------------


def classify_question(query: str) -> tuple[Question | None, str]:
    """The direct-fact shape of `query`, or None and a content-free reason to abstain."""
    if not isinstance(query, str) or not query.strip():
        return None, "empty_query"
    if len(query) > MAX_QUESTION_CHARS:
        return None, "query_too_long"
    words = normalize_query(query).split()
    if not words:
        return None, "empty_query"
    if words[0] in ACTOR or words[:2] in (["which", "person"], ["which", "people"]):
        return None, "abstain:actor_question"
    problem = _abstain_reason(words[1:])
    if problem:
        return None, problem
    for parse in (_possessive_question, _choice_question, _event_question, _location_question):
        question = parse(words)
        if isinstance(question, str):
            return None, question
        if question is not None:
            return question, "ok"
    return None, "unsupported_question"


def _possessive_question(w: list[str]) -> Question | str | None:
    if w[0] in ("what's", "whats"):
        rest = w[1:]
    elif w[0] == "what" and len(w) > 1 and w[1] in COPULA:
        rest = w[2:]
    else:
        return None
    owners = [i for i, word in enumerate(rest) if _owner(word)]
    if not owners:
        return None
    if len(owners) > 1:
        return "abstain:multi_hop"
    subject, prop = _subject(rest[: owners[0]] + [_owner(rest[owners[0]])]), _phrase(rest[owners[0] + 1 :])
    if not subject or not 1 <= len(prop) <= MAX_PROPERTY_WORDS:
        return None
    if RELATIONSHIP & set(prop):
        return "abstain:relationship"
    return Question(POSSESSIVE, subject, prop)


def _choice_question(w: list[str]) -> Question | str | None:
    if w[0] not in ("which", "what"):
        return None
    aux = next((i for i in range(1, min(len(w), MAX_PROPERTY_WORDS + 2)) if w[i] in AUX), None)
    verb = next((i for i, word in enumerate(w) if word in CHOICE_VERBS), None)
    if aux is None or verb is None or not 1 <= verb - aux - 1 <= MAX_SUBJECT_WORDS:
        return None
    if verb_after_aux(w[aux], w[verb], CHOICE_LEMMAS) is None:  # "did Morgan chosen": not understood
        return None
    if any(_owner(word) for word in w[aux + 1 : verb]):
        return "abstain:multi_hop"
    subject = _subject(w[aux + 1 : verb])
    tail = w[verb + 1 :]
    if tail and (tail[0] not in ("for", "as") or len(tail) > MAX_PROPERTY_WORDS + 2):
        return None
    prop = _bag(w[1:aux] + tail[1:])
    if not subject or not prop:
        return None
    return Question(CHOICE, subject, prop)


def _event_question(w: list[str]) -> Question | str | None:
    if w[0] == "when" and len(w) > 2 and w[1] in COPULA:
        detail, event = "when", w[2:]
    elif w[:2] == ["when", "will"] and w[-1:] == ["be"]:
        detail, event = "when", w[2:-1]
    elif (
        w[0] == "when"
        and len(w) > 3
        and w[1] in ("does", "did", "do", "will", "has", "have", "had")
        and w[-1] in EVENT_VERBS
    ):
        if verb_after_aux(w[1], w[-1], EVENT_LEMMAS) is None:  # "when does it started"
            return None
        detail, event = "when", w[2:-1]
    elif w[0] == "what" and len(w) > 3 and w[1] in ("time", "date", "day") and w[2] in COPULA:
        detail, event = w[1], w[3:]
    else:
        return None
    if sum(1 for word in event if _owner(word)) > 1:
        return "abstain:multi_hop"
    if event[-1:] and event[-1] in SCHEDULED:  # "when is the report due?"
        event = event[:-1]
    elif event[-1:] and verb_after_aux(w[1], event[-1], EVENT_LEMMAS):  # "when is the offsite starting?"
        event = event[:-1]
    key = _event_key(event)
    return Question(EVENT_TIME, key, detail=detail) if key else None


def _location_question(w: list[str]) -> Question | str | None:
    if w[0] != "where" or len(w) < 4:
        return None
    # where does/did/will X live, where is/was X living, where has/had X lived: the auxiliary
    # decides which form the verb must take, and any other pairing is not understood
    verb = verb_after_aux(w[1], w[-1], LOCATION_LEMMAS)
    if verb is None or w[1] == "will":  # a future home is not where someone lives
        return None
    if any(_owner(word) for word in w[2:-1]):
        return "abstain:multi_hop"
    subject = _subject(w[2:-1])
    return Question(LOCATION, subject, detail=verb) if subject else None


# --- records ------------------------------------------------------------------------------------


def record_value(question: Question, text: str) -> str | None:
    """The value `text` binds to the asked subject and property, or None if it does not state
    exactly that fact in one canonical, unhedged sentence."""
    words = _record_words(text)
    if words is None:
        return None
    match question.shape:
        case "possessive_property":
            return _possessive_value(question, words)
        case "direct_choice":
            return _choice_value(question, words)
        case "event_time":
            return _event_value(question, words)
        case "work_live_location":
            return _location_value(question, words)
    return None


def _record_words(text: str) -> list[str] | None:
    if not isinstance(text, str) or len(text) > MAX_FACT_CHARS:
        return None
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES)
    text = _BLOCK_ID_RE.sub("", _CONTROL_RE.sub(" ", text)).strip().rstrip(".!").strip()
    if not text or _SENTENCE_BREAK_RE.search(text):
        return None
    words = [word.strip(_STRIP) for word in text.casefold().split()]
    words = [word for word in words if word]
    if not words or _abstain_reason(words):
        return None
    return words


def _possessive_value(q: Question, w: list[str]) -> str | None:
    copula = next((i for i, word in enumerate(w) if word in COPULA), None)
    owner = next((i for i, word in enumerate(w[: copula or 0]) if _owner(word)), None)
    if copula is None or owner is None:
        return None
    subject = _subject(w[:owner] + [_owner(w[owner])])
    return _value(w[copula + 1 :]) if (subject, _phrase(w[owner + 1 : copula])) == (q.subject, q.prop) else None


def _choice_value(q: Question, w: list[str]) -> str | None:
    verb = next((i for i, word in enumerate(w) if word in CHOICE_VERBS), None)
    if verb is None:
        return None
    subject_words = w[:verb]
    if subject_words and subject_words[-1] in ("has", "have", "had"):
        subject_words = subject_words[:-1]
    link = next((i for i in range(verb + 1, len(w)) if w[i] in ("as", "for")), None)
    if link is None or _subject(subject_words) != q.subject or _bag(w[link + 1 :]) != q.prop:
        return None
    value = w[verb + 1 : link]
    return _value(value) if len(value) <= 6 else None


def _event_value(q: Question, w: list[str]) -> str | None:
    for i, word in enumerate(w[: MAX_EVENT_WORDS + 2]):
        if word in COPULA or word in EVENT_VERBS or (word == "will" and w[i + 1 : i + 2] == ["be"]):
            break
    else:
        return None
    if _event_key(w[:i]) != q.subject:
        return None
    rest = w[i + 2 :] if word == "will" else w[i + 1 :]
    if rest[:1] and rest[0] in SCHEDULED:
        rest = rest[1:]
    return _date_value(rest, q.detail)


def _location_value(q: Question, w: list[str]) -> str | None:
    verbs = LIVE_VERBS[q.detail]
    verb = next((i for i, word in enumerate(w) if word in verbs), None)
    if verb is None or verb + 2 > len(w) or w[verb + 1] not in PREPOSITIONS[q.detail]:
        return None
    subject_words = w[:verb]
    while subject_words and subject_words[-1] in ("is", "has", "still", "currently", "now"):
        subject_words = subject_words[:-1]
    return _value(w[verb + 2 :]) if _subject(subject_words) == q.subject else None


def _date_value(words: list[str], detail: str) -> str | None:
    """The words as a date/time value, if every word is date/time vocabulary and the kind of
    value the question asked for (a time for "what time", a date for "what date") is present."""
    has_date = has_time = False
    for word in words:
        if word in _WEEKDAYS or word in _MONTHS or _DATE_RE.fullmatch(word):
            has_date = True
        elif _TIME_RE.fullmatch(word):
            has_time = True
        elif word not in _DATE_FILLER and not _ZONE_RE.fullmatch(word):
            return None
    wanted = {"time": has_time, "date": has_date, "day": has_date}.get(detail, has_date or has_time)
    return " ".join(words) if wanted and len(words) <= MAX_VALUE_WORDS else None


# --- shared helpers -----------------------------------------------------------------------------


def _abstain_reason(words: list[str]) -> str | None:
    """Why a token list (question after its wh-word, or a whole record) must abstain."""
    present = set(words)
    joined = f" {' '.join(words)} "
    if present & COORDINATION or any(f" {p} " in joined for p in COORDINATION_PHRASES):
        return "abstain:coordination"
    if present & (REPORTED | DITRANSITIVE):
        return "abstain:reported_speech"
    if (
        present & NEGATION
        or any(w.endswith("n't") or w.startswith("ex-") for w in words)
        or any(f" {p} " in joined for p in NEGATION_PHRASES)
    ):
        return "abstain:negation"
    if present & SUBORDINATE or any(f" {p} " in joined for p in SUBORDINATE_PHRASES):
        return "abstain:subordinate_clause"
    return None


def _owner(word: str) -> str:
    """ "morgan's" -> "morgan", "james'" -> "james"; "" for a word that is not possessive."""
    if word.endswith("'s") and len(word) > 2:
        return word[:-2]
    if word.endswith("s'") and len(word) > 2:
        return word[:-1]
    return ""


def _lemma(word: str) -> str:
    word = _ALIASES.get(word, word)
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _phrase(words: list[str]) -> tuple[str, ...]:
    """Content words of a noun phrase, in order, without determiners."""
    return tuple(_lemma(word) for word in words if word not in DETERMINERS)


def _bag(words: list[str]) -> tuple[str, ...]:
    """An order-free property key: "deployment color" == "color for the deployment"."""
    return tuple(sorted(_lemma(word) for word in words if word not in DETERMINERS and word not in ("for", "of", "as")))


def _subject(words: list[str]) -> tuple[str, ...]:
    """A named subject key; () for a pronoun, a determiner-only phrase or too many words."""
    key = _phrase(words)
    if not 1 <= len(key) <= MAX_SUBJECT_WORDS or set(words) & PRONOUNS:
        return ()
    return key


def _event_key(words: list[str]) -> tuple[str, ...]:
    """An event phrase key; a possessive stays visible ("morgan 's birthday")."""
    key: list[str] = []
    for word in words:
        owner = _owner(word)
        key.extend((_lemma(owner), "'s") if owner else (_lemma(word),) if word not in DETERMINERS else ())
    if not 1 <= len(key) <= MAX_EVENT_WORDS or set(words) & PRONOUNS:
        return ()
    return tuple(key)


def _value(words: list[str]) -> str | None:
    """A bound value: non-empty, short, and not itself a pronoun."""
    if not 1 <= len(words) <= MAX_VALUE_WORDS or set(words) <= PRONOUNS | DETERMINERS:
        return None
    return " ".join(words)
