"""English word forms a prefix cannot reach: irregular verbs and plurals ("met" / "meet", "went" /
"go", "bought" / "buy", "children" / "child"), so a question and its answer written in different
tenses still share the word.

Recall matches an English word through a light stem used as a prefix ("painted" -> "paint*"),
which finds the regular forms of a word but never an irregular one: "Where did they meet?" missed
"we met at the café", "How many children" missed "my child". This table is language knowledge,
not fitted to any data: the common irregular verbs of English (base, past, past participle; the
-s and -ing forms follow the spelling rules below) and the irregular plurals. Left out on purpose:
forms that are mostly another word ("bit", "lay", "rose", "ground", "wound", "lie"/"lay"), and
the verbs that are stop words anyway (be, have, do, get, go's "went" is kept: "go" is a stop word
but "gone"/"going" are not).

`forms(word)`: an irregular form leads to every form of its lemma ("met" -> meet, meets, meeting,
met); a regular form only to the irregular ones ("meet" -> met), because its own regular forms are
the stem's business and adding them ("read" -> "reading") measured worse. Stop words among the
forms are left out where the unit is built (gateway/recall/query.py): "went" would match almost
every session. Measured with bench/recall.py, LoCoMo raw questions, pooled, lexical: tune any@1
171 -> 170 of 231, MRR 0.804 -> 0.804; held 400 -> 404 of 529, MRR 0.823 -> 0.828. Adding every
form to every word instead: tune 168, held 404.
"""

from __future__ import annotations

import re

# base past participle [-ing when the spelling rule would get it wrong]
_VERBS = """
arise arose arisen | awake awoke awoken | beat beat beaten | become became become |
begin began begun beginning | bend bent bent | bet bet bet | bind bound bound | bite bit bitten |
bleed bled bled | blow blew blown | break broke broken | breed bred bred | bring brought brought |
build built built | burn burnt burnt | buy bought bought | catch caught caught | choose chose chosen |
cling clung clung | come came come | cost cost cost | creep crept crept | cut cut cut | deal dealt dealt |
dig dug dug | draw drew drawn | dream dreamt dreamt | drink drank drunk | drive drove driven |
eat ate eaten | fall fell fallen | feed fed fed | feel felt felt | fight fought fought | find found found |
flee fled fled | fly flew flown | forbid forbade forbidden forbidding | forget forgot forgotten forgetting |
forgive forgave forgiven | freeze froze frozen | give gave given | go went gone | grow grew grown |
hang hung hung | hear heard heard | hide hid hidden | hit hit hit | hold held held | hurt hurt hurt |
keep kept kept | kneel knelt knelt | know knew known | lead led led | lean leant leant | leap leapt leapt |
learn learnt learnt | leave left left | lend lent lent | lose lost lost | make made made |
mean meant meant | meet met met | overcome overcame overcome | pay paid paid | prove proved proven |
quit quit quit | read read read | ride rode ridden | rise rose risen | run ran run |
see saw seen | seek sought sought | sell sold sold | send sent sent | set set set | sew sewed sewn |
shake shook shaken | shine shone shone | shoot shot shot | show showed shown | shrink shrank shrunk |
shut shut shut | sing sang sung | sink sank sunk | sit sat sat | sleep slept slept | slide slid slid |
speak spoke spoken | speed sped sped | spend spent spent | spill spilt spilt | spin spun spun |
split split split | spread spread spread | stand stood stood | steal stole stolen |
stick stuck stuck | sting stung stung | stink stank stunk | strike struck struck | string strung strung |
strive strove striven | swear swore sworn | sweep swept swept | swim swam swum | swing swung swung |
take took taken | teach taught taught | tear tore torn | think thought thought | throw threw thrown |
understand understood understood | undertake undertook undertaken | upset upset upset upsetting |
wake woke woken | wear wore worn | weave wove woven | weep wept wept | win won won |
withdraw withdrew withdrawn | write wrote written
"""
_PLURALS = """
child children | man men | woman women | person people | foot feet | tooth teeth | mouse mice |
goose geese | wife wives | knife knives | wolf wolves | shelf shelves | half halves | thief thieves |
loaf loaves | calf calves | ox oxen | cactus cacti | crisis crises | analysis analyses | thesis theses |
phenomenon phenomena | criterion criteria
"""
# forms that are mostly some other word: never a door into the verb ("a bit", "lay", "a rose")
_NOT_A_FORM = frozenset("bit lay rose bound".split())

_VOWELS = "aeiou"


def _third_person(base: str) -> str:
    if base.endswith(("s", "sh", "ch", "x", "z", "o")):
        return base + "es"
    if base.endswith("y") and base[-2:-1] not in _VOWELS:
        return base[:-1] + "ies"
    return base + "s"


def _present_participle(base: str) -> str:
    if base.endswith("ie"):
        return base[:-2] + "ying"
    if base.endswith("e") and not base.endswith(("ee", "ye", "oe")):
        return base[:-1] + "ing"
    # one syllable ending consonant-vowel-consonant doubles its last letter: run -> running
    if (
        len(re.findall(f"[{_VOWELS}]+", base)) == 1
        and len(base) >= 3
        and base[-1] not in _VOWELS + "wxy"
        and base[-2] in _VOWELS
        and base[-3] not in _VOWELS
    ):
        return base + base[-1] + "ing"
    return base + "ing"


def _build() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}

    def link(group: set[str], irregular: set[str]) -> None:
        group -= _NOT_A_FORM  # neither a way in nor a way out
        irregular &= group
        for form in group:
            # an irregular form leads to every form; a regular one only to the irregular ones (its
            # own regular forms are the stem's business: "read" does not become "reading" here)
            table.setdefault(form, set()).update(group if form in irregular else irregular)

    for entry in _VERBS.split("|"):
        parts = entry.split()
        base, past, participle = parts[:3]
        ing = parts[3] if len(parts) > 3 else _present_participle(base)
        regular = {base, _third_person(base), ing}
        link(regular | {past, participle}, {past, participle} - regular)
    for entry in _PLURALS.split("|"):
        singular, plural = entry.split()
        link({singular, plural}, {singular, plural})
    return {form: frozenset(group) for form, group in table.items() if group}


_TABLE = _build()


def forms(word: str) -> frozenset[str]:
    """Every form of each irregular lemma `word` (any case) is a form of, itself included; empty
    when it is no irregular form."""
    return _TABLE.get(word.lower(), frozenset())
