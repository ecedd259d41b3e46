"""A synthetic chat corpus like the reference's: English with commands, paths and URLs, ~15 %
Chinese, ~10 % long tool output. Deterministic for a seed. Also plants findable facts."""

from __future__ import annotations

import random
from dataclasses import dataclass

EN_WORDS = (
    "deploy service config build release cache docker network timeout retry queue worker database "
    "index search migrate backup restore token session user group thread message reply error fix "
    "patch branch merge review test pipeline latency memory disk cpu load balancer proxy cert tls "
    "schedule cron job alert metric dashboard log trace span request response header payload json "
    "yaml python rust node package version upgrade rollback feature flag tenant region cluster pod "
    "volume mount secret vault rotate key permission role policy audit webhook callback bot chat "
    "the a to of and in is it that for on with as this was at by be from or have an not are but"
).split()
ZH_PHRASES = (
    "我们需要部署新的服务 网关超时了怎么办 数据库迁移已经完成 请检查一下配置文件 这个问题昨天修好了 "
    "服务器负载太高 明天上午开会讨论 周末去公园散步 她在学习钢琴 机房今天停电 日志里有很多错误 "
    "缓存命中率下降 用户反馈登录失败 版本发布推迟到下周 证书快过期了 监控告警太多"
).split()
COMMANDS = [
    "pip install -e .",
    "docker compose up -d",
    "kubectl rollout restart deploy/api",
    "git rebase -i HEAD~3",
    "pyinstaller --onefile app.py",
    "systemctl restart nginx",
    "journalctl -u chinwag --since today",
    "curl -sS https://api.example.com/v1/health",
    "psql -h db.internal -U app",
    "make -j4 test",
]
PATHS = [
    "/etc/nginx/nginx.conf",
    "~/.config/chinwag/config.yaml",
    "src/gateway/runner.py",
    "/var/log/syslog",
    "C:\\Users\\dev\\app\\main.py",
    "./build/output/bundle.js",
]
URLS = [
    "https://docs.example.com/guide/setup",
    "https://github.com/example/repo/issues/42",
    "http://localhost:8080/metrics",
    "https://status.example.net/incidents/2024-05",
]


@dataclass
class Message:
    session: int
    role: str
    content: str


def _english(rng: random.Random, n: int) -> str:
    words = [rng.choice(EN_WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), rng.choice(COMMANDS))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words) + 1), rng.choice(PATHS))
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words) + 1), rng.choice(URLS))
    return " ".join(words)


def _tool_output(rng: random.Random) -> str:
    lines = []
    for i in range(rng.randint(15, 60)):
        lines.append(
            f"{rng.choice(['INFO', 'WARN', 'DEBUG', 'ERROR'])} [{rng.choice(['worker', 'api', 'db'])}-{rng.randint(1, 40)}] "
            f"{_english(rng, rng.randint(4, 10))} code={rng.randint(100, 999)} t={rng.random():.4f}"
        )
    return "\n".join(lines)


def generate(n_messages: int, seed: int = 7, messages_per_session: int = 20):
    """Yield Messages: user/assistant turns, with tool output in between."""
    rng = random.Random(seed)
    for i in range(n_messages):
        session = i // messages_per_session
        r = rng.random()
        if r < 0.10:
            yield Message(session, "tool", _tool_output(rng))
        elif r < 0.25:
            text = rng.choice(ZH_PHRASES) + "，" + rng.choice(ZH_PHRASES)
            if rng.random() < 0.4:
                text += " " + _english(rng, 4)
            yield Message(session, rng.choice(["user", "assistant"]), text)
        else:
            yield Message(session, "user" if i % 2 == 0 else "assistant", _english(rng, rng.randint(8, 40)))


# Facts planted once each in the corpus (message index -> text); every one must be found.
PLANTED = {
    "ERR_004211": "the worker died with ERR_004211 after the upgrade",
    "node-17.corp.example.net": "ssh into node-17.corp.example.net and restart the agent",
    "alice.wong@example.org": "send the report to alice.wong@example.org tomorrow",
    "https://wiki.example.com/runbooks/pager-rotation": "see https://wiki.example.com/runbooks/pager-rotation for the steps",
    "松兰 机房": "松兰说机房的空调坏了",
    "zanzibar quokka": "we named the cluster zanzibar after the quokka incident",
}
