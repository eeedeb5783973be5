"""One credential detector for every place a secret could be stored, committed, reported or sent.

The rules are detect-secrets' regex plugins (Yelp's detector, pinned in pyproject.toml: AWS key
ids and keyword-assigned AWS secrets, PEM/OpenSSH/PGP private keys, Stripe, JWT, GitHub, GitLab,
Slack, OpenAI, npm, PyPI, SendGrid, Twilio, Discord, Telegram, Square, Azure storage, Mailchimp,
IBM, SoftLayer, Cloudant, basic-auth URLs) plus this project's rules for shapes it lacks
(Anthropic `sk-ant-`, other `sk-`/`rk-`/`pk-` API keys, Google `AIza`, Hugging Face `hf_`,
`github_pat_`, Stripe test-mode keys, bearer tokens, `aws_secret_access_key=`, a bare
40-character AWS secret key).
Left out of detect-secrets: its keyword and entropy plugins (they flag ordinary prose and
hashes; keyword assignments are redacted, not refused), its public-IP plugin (an address is no
credential) and its Artifactory plugin (its `AP…` password shape matches capitalised words).

Every rule matches inside a word, so `ANTHROPIC_API_KEY_sk-ant-…` and `aws_key_id_AKIA…` are
found. A finding covers the rest of the token it ends in, and a private key runs to its END
line, so redacting it leaves nothing of the secret.

    find_credential("use aws_key_id_AKIA…")      # -> "AWS access key (detect-secrets)" or None
    redact_text(log_line)                          # credentials replaced by «redacted»
    redact_data(model_output_json)                 # the same inside every string of JSON data
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REDACTED = "«redacted»"
# detect-secrets plugins used, by module and class (detect_secrets/plugins/<module>.py)
DETECT_SECRETS_PLUGINS: tuple[tuple[str, str, str], ...] = (
    ("aws", "AWSKeyDetector", "AWS access key"),
    ("private_key", "PrivateKeyDetector", "private key"),
    ("stripe", "StripeDetector", "Stripe key"),
    ("jwt", "JwtTokenDetector", "JSON web token"),
    ("github_token", "GitHubTokenDetector", "GitHub token"),
    ("gitlab_token", "GitLabTokenDetector", "GitLab token"),
    ("slack", "SlackDetector", "Slack token"),
    ("openai", "OpenAIDetector", "OpenAI key"),
    ("npm", "NpmDetector", "npm token"),
    ("pypi_token", "PypiTokenDetector", "PyPI token"),
    ("sendgrid", "SendGridDetector", "SendGrid key"),
    ("twilio", "TwilioKeyDetector", "Twilio key"),
    ("discord", "DiscordBotTokenDetector", "Discord bot token"),
    ("telegram_token", "TelegramBotTokenDetector", "Telegram bot token"),
    ("square_oauth", "SquareOAuthDetector", "Square OAuth secret"),
    ("azure_storage_key", "AzureStorageKeyDetector", "Azure storage key"),
    ("mailchimp", "MailchimpDetector", "Mailchimp key"),
    ("ibm_cloud_iam", "IbmCloudIamDetector", "IBM Cloud IAM key"),
    ("ibm_cos_hmac", "IbmCosHmacDetector", "IBM COS HMAC secret"),
    ("softlayer", "SoftlayerDetector", "SoftLayer key"),
    ("cloudant", "CloudantDetector", "Cloudant credential"),
    ("basic_auth", "BasicAuthDetector", "password in a URL"),
)
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-+/=.~]*")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----")
_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=:\s-]|\\n)*")  # without an END line: the base64 lines that follow
MIN_GLUED_KEY = 24  # a generic prefix glued to a letter or digit needs a key-like token this long


@dataclass(frozen=True)
class Rule:
    """One credential shape: a name for messages, its pattern and an optional check of a match."""

    name: str
    pattern: re.Pattern[str]
    accept: Callable[[str, re.Match[str]], bool] | None = None
    runs_to_end_marker: bool = False  # a PEM block: the secret is everything up to its END line


@dataclass(frozen=True)
class Finding:
    rule: str
    start: int
    end: int


def _mixed(token: str) -> bool:
    return any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token)


def _unglued_or_keylike(text: str, m: re.Match[str]) -> bool:
    """A short generic prefix (`sk-`, `hf_`) inside a word is a key only if what follows looks like one:
    "task-management" holds `sk-` but is no key; `KEYsk-Ab3…` with a long mixed token is."""
    glued = m.start() > 0 and text[m.start() - 1].isalnum()
    return not glued or (len(m.group(0)) >= MIN_GLUED_KEY and _mixed(m.group(0)))


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


def _bare_aws_secret(text: str, m: re.Match[str]) -> bool:
    """40 base64 characters alone: mixed case and digits, and as random as a key (hex digests,
    paths and words are not)."""
    token = m.group(0)
    return _mixed(token) and _entropy(token) >= 4.0


OWN_RULES: tuple[Rule, ...] = (
    Rule("Anthropic API key (sk-ant-)", re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}")),
    Rule("API key (sk-/rk-/pk-)", re.compile(r"(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}"), _unglued_or_keylike),
    Rule(
        "AWS secret access key",
        re.compile(r"(?i)(?P<pre>aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?)(?P<secret>[A-Za-z0-9/+=]{16,})"),
    ),
    Rule(
        "AWS secret access key (bare)",
        re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
        _bare_aws_secret,
    ),
    Rule("GitHub fine-grained token (github_pat_)", re.compile(r"github_pat_[A-Za-z0-9_]{20,}")),
    Rule("Google API key (AIza)", re.compile(r"AIza[0-9A-Za-z_-]{30,}")),
    Rule("Hugging Face token (hf_)", re.compile(r"hf_[A-Za-z0-9]{20,}"), _unglued_or_keylike),
    Rule("Stripe test-mode key (sk_test_/rk_test_)", re.compile(r"[sr]k_test_[0-9A-Za-z]{16,}")),
    Rule(
        "bearer token",
        re.compile(r"(?i)(?P<pre>bearer\s+)(?P<secret>(?=[A-Za-z._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{8,})"),
    ),
    Rule(
        "private key",
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"),
        runs_to_end_marker=True,
    ),
)
# Redacted in logs and messages but never refused: prose such as "the password: never share it"
# has this shape too.
CREDENTIAL_ASSIGNMENT = re.compile(
    r"(?i)(?P<pre>\b\w*(?:api[_-]?key|access[_-]?key|token|secret|password)\w*[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<secret>[^\s\"',]{4,})"
)


def _plugin_rule(module: str, cls: str, label: str, pattern: re.Pattern[str]) -> Rule:
    from importlib import import_module

    plugin = getattr(import_module(f"detect_secrets.plugins.{module}"), cls)
    accept = None
    if cls == "JwtTokenDetector":  # its regex also matches text that merely starts like a JWT

        def accept(text: str, m: re.Match[str]) -> bool:
            return bool(plugin.is_formally_valid(m.group(0)))

    return Rule(f"{label} (detect-secrets {cls})", pattern, accept, runs_to_end_marker=cls == "PrivateKeyDetector")


@functools.cache
def rules() -> tuple[Rule, ...]:
    """Every rule, detect-secrets' first; imported on first use (detect-secrets pulls in `requests`)."""
    from importlib import import_module

    out = []
    for module, cls, label in DETECT_SECRETS_PLUGINS:
        plugin = getattr(import_module(f"detect_secrets.plugins.{module}"), cls)
        out += [_plugin_rule(module, cls, label, p) for p in plugin.denylist]
    return (*out, *OWN_RULES)


def _span(rule: Rule, text: str, m: re.Match[str]) -> tuple[int, int]:
    """The secret's characters: a named `secret` group, else the longest captured group of 8+
    characters (detect-secrets' way of marking the secret in a keyword match), else the match;
    then on to the end of its token (or of a private key's block)."""
    names = m.re.groupindex
    if "secret" in names:
        start, end = m.span("secret")
    else:
        groups = [m.span(i) for i in range(1, (m.re.groups or 0) + 1) if m.group(i) and len(m.group(i)) >= 8]
        start, end = max(groups, key=lambda s: s[1] - s[0]) if groups else m.span()
    if rule.runs_to_end_marker:
        tail = _PEM_END.search(text, end) or _PEM_BODY.match(text, end)
        return start, tail.end() if tail else end
    tail = _TOKEN_TAIL.match(text, end)
    extended = tail.end() if tail else end
    while extended > end and text[extended - 1] in ".=":
        extended -= 1
    return start, max(end, extended)


def findings(text: str) -> list[Finding]:
    """Every credential in `text`, in order of position, overlapping ones merged."""
    found = []
    for rule in rules():
        for m in rule.pattern.finditer(text):
            if rule.accept is None or rule.accept(text, m):
                found.append(Finding(rule.name, *_span(rule, text, m)))
    merged: list[Finding] = []
    for f in sorted(found, key=lambda f: (f.start, -f.end)):
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Finding(last.rule, last.start, max(last.end, f.end))
        else:
            merged.append(f)
    return merged


def find_credential(text: str) -> str | None:
    """The name of the first credential rule `text` matches, or None. Text already redacted
    counts as holding one: a redacted answer replayed is refused as the first answer was."""
    if REDACTED in text:
        return f"a credential already redacted to {REDACTED}"
    for rule in rules():
        for m in rule.pattern.finditer(text):
            if rule.accept is None or rule.accept(text, m):
                return rule.name
    return None


def redact_text(text: str, assignments: bool = True) -> str:
    """`text` with every credential (and, unless told not to, every `key=value` assignment of a
    secret-named key) replaced by «redacted»."""
    for f in reversed(findings(text)):
        text = text[: f.start] + REDACTED + text[f.end :]
    if assignments:
        text = CREDENTIAL_ASSIGNMENT.sub(lambda m: m.group("pre") + REDACTED, text)
    return text


def redact_data(data: Any, assignments: bool = False) -> Any:
    """JSON-like data with the credentials in every string (keys too) redacted; `key=value`
    assignments only if asked (in a model's prose "password: refuse" is no secret)."""
    if isinstance(data, str):
        return redact_text(data, assignments)
    if isinstance(data, dict):
        return {redact_data(k, assignments): redact_data(v, assignments) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_data(v, assignments) for v in data]
    return data


def find_in_data(data: Any, where: str = "") -> tuple[str, str] | None:
    """(field path, rule name) of the first credential in any key or string of JSON-like data."""
    if isinstance(data, str):
        name = find_credential(data)
        return (where or "(document)", name) if name else None
    if isinstance(data, dict):
        items: Any = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return None
    for key, value in items:
        path = f"{where}.{key}" if where else str(key)
        if (hit := find_in_data(key, path) if isinstance(key, str) else None) or (hit := find_in_data(value, path)):
            return hit
    return None


def find_in_lines(text: str) -> tuple[int, str] | None:
    """(1-based line number, rule name) of the first credential in `text`, or None."""
    found = findings(text)
    return (text.count("\n", 0, found[0].start) + 1, found[0].rule) if found else None
