"""The weights and budgets of recall's ranking, in one frozen value passed down the stages.

Every number here was chosen by measuring (bench/recall.py over the labelled dev data, split into
tune and held halves): each field says, in one line, what it weighs and why it has its value; the
module that uses it says more (rank.py, read.py, semantic.py, answers.py). A caller that wants other
weights, a test or a bench trying a value, passes `RankWeights(field=...)` to `find_sessions`
instead of changing a module's globals for everyone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankWeights:
    # words: a session-level BM25 over the query's units (gateway/recall/rank.py)
    k1: float = 1.2  # tf saturation: one chatty session cannot win on a single word said over and over
    b: float = 0.5  # sessions differ in length far less than documents do; normalise gently
    co_weight: float = 0.5  # best(s), several query words in one short turn and its reply, against the sum
    msg_k1: float = 1.2  # in best(s) a hit in a short message says more than one in a long one (BM25, tf = 1)
    msg_b: float = 0.5
    passage: int = 2  # consecutive messages judged together: a question and its answer are a turn and its reply
    rerank: int = 30  # lexical leaders whose passages are examined
    pair_weight: float = 0.5  # a two-word unit against a single word
    # dates and order: MemoryBank-CN dev (56 questions, + local model) scoped any@1 0.911 -> 0.982, pooled
    # 0.839 -> 0.946 (0.5x changes nothing, 1x half, 2x all; 10x the same); LoCoMo unchanged; on months and
    # years the same weight cost LoCoMo held 3 questions, so those keep their idf
    day_over_words: float = 2.0  # a named day (or the first / latest conversation) against all the query's words
    # who asks
    own_weight: float = 2.0  # the asker's own sessions, in pooled recall: chosen on the tune split (1.5 -> 3 plateau)
    # reading (gateway/recall/read.py): the rows read set a query's cost on a large store
    probe: int = 150  # newest matching messages every unit looks at (fewer when the query has many units)
    probe_budget: int = 1500  # the probes of all units together, at most (each keeps at least min_probe)
    min_probe: int = 40
    hit_budget: int = 3000  # matches read beyond the probes, over all units: 2,500 or 4,000 cost --needles any@1
    # meaning (gateway/recall/semantic.py)
    leaders: int = 10  # lexical leaders re-ranked by similarity (the answer is in the lexical top 10 for >90 %)
    semantic_weight: float = 0.3  # dev data, e5-small: MRR flat over 0.3-0.5, any@5 lower past 0.5
    overrule_margin: float = 0.1  # cosine lead that lets meaning take the first place from the words
    # newest windows compared when the asker may see every session (or no word matched), and about as many of the
    # asker's newest sessions: 5,000 compare in ~10 ms at 1M messages (most of it reading them), whatever the store
    vector_scan: int = 5000
    meaning_leaders: int = (
        5  # sessions standing out most in meaning that join the words' candidates (as many as are recapped)
    )
    # one standard deviation of standing out (semantic.nearest) against all the question's word informativeness, times
    # the share the words leave unexplained: LoCoMo-Plus dev any@5 scoped/pooled 0.204/0.095 at 0.5, 0.214/0.095 at 1-2
    # (measured before entrants came only from outside the leaders and pooled margins from the asker's own pool;
    # now 0.209/0.214 at 1.0)
    # (at 0.3 ungated, LoCoMo dev MRR fell 0.005-0.007; gated at 1.0 it moves -0.001/-0.002, any@1 unchanged)
    margin_weight: float = 1.0
    passage_weight: float = 0.15  # a passage's meaning against its words, inside best(s) (flat over 0.05-0.2)
    passage_messages: int = 8  # a leader's weightiest evidence messages whose windows are looked up (4 cost a question)
    # the kind of answer asked for (gateway/recall/answers.py)
    gain: float = 0.3  # how much more a passage with the asked-for kind of answer counts (LoCoMo tune any@1 +0.004)
    before: int = 2  # messages ahead of a passage where the answer is looked for too (1 lets two out of the five)


DEFAULT_WEIGHTS = RankWeights()
