"""Refuse text that carries a secret, before anything is written.

`find_credential` names the kind of secret it saw ("an OpenAI API key"), never the secret.
The families follow gitleaks' rule set (the field's reference), compared rule by rule: vendor
tokens with a fixed prefix (`_PREFIXED`), the big providers, webhook URLs, passwords in URLs and
`password=`-style assignments (gitleaks' generic rule). Rules that need a vendor's name beside a
bare hex string (gitleaks' "<vendor> ... = <32 hex>" family) are covered by the assignment
detector when the name ends in key/token/secret/password, and otherwise left out: a bare hash
in prose is not a secret.

Every pattern is linear-time on Python's backtracking engine: each one starts with a literal or
a lookbehind that refuses to start inside a run of its own token characters, so a long run is
scanned once rather than once per start position, and no quantified group can split the same
text two ways. A 1 MiB text is checked in full.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memvault.vault.errors import CredentialRefused

_PLACEHOLDER_WORDS = ("xxx", "***", "...", "your", "example", "placeholder", "redacted", "changeme", "dummy")
_URL_PLACEHOLDERS = frozenset({"pass", "password", "passwd", "pwd", "secret", "pw", "p", "x"})


def _mixed_token(token: str) -> bool:
    """Keys are random: letters and digits together, in one long alphanumeric run."""
    has_digit = any(c.isdigit() for c in token)
    has_alpha = any(c.isalpha() for c in token)
    longest = max((len(run) for run in re.split(r"[^A-Za-z0-9]", token)), default=0)
    return has_digit and has_alpha and longest >= 16


def _letters_and_digits(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _url_password(password: str) -> bool:
    return password.lower() not in _URL_PLACEHOLDERS and not _is_placeholder(password)


def _is_placeholder(value: str) -> bool:
    lowered = value.lower()
    if any(word in lowered for word in _PLACEHOLDER_WORDS) or len(set(value)) == 1:
        return True
    if value[0] + value[-1] in ("<>", "[]", "{}"):  # <password>, [token]: a slot to fill in
        return True
    # a reference to where the secret lives ($VAR, ${VAR}, %VAR%, os.environ[...], get_key()) is not the secret
    return value[0] in "$%{" or re.match(r"[A-Za-z_][A-Za-z0-9_.]*[(\[]", value) is not None


def _assigned_secret(value: str) -> bool:
    """A value given to `password=` / `token:`: long enough, not a placeholder, not a plain word."""
    if len(value) < 8 or _is_placeholder(value):
        return False
    # one plain word ("Token: rotation") or a bare date is prose; letters with a digit or symbol, or a
    # long passphrase, is a secret
    has_letter = any(c.isalpha() for c in value)
    return (has_letter and any(not c.isalpha() for c in value)) or len(value) >= 16


@dataclass(frozen=True)
class _Detector:
    kind: str
    needles: tuple[str, ...]  # the pattern cannot match without one of these (a lowercase one: in text.lower())
    pattern: re.Pattern[str]
    accept: Callable[[str], bool] | None = None  # checks group 1 (or the whole match) when given


_ASSIGNED_NAMES = (
    r"pass(?:word|wd|phrase)?|pwd"
    r"|(?:client[_-]?|app[_-]?)?secret(?:[_-]?(?:access[_-]?)?key)?"
    r"|(?:api|access|auth|refresh|bearer|session|private)[_-]?(?:key|token)"
    r"|apikey|token"
)

_TOKEN = "A-Za-z0-9_-"  # base64url, the alphabet most API keys are drawn from

_DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "a private key block",
        ("PRIVATE KEY",),
        re.compile(r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"),
    ),
    _Detector(
        "an AWS secret access key",
        ("secret",),
        re.compile(
            r"(?i:aws[_-]?secret(?:[_-]?access)?[_-]?key|secret[_-]?access[_-]?key)[\"']?\s{0,8}(?::=|=>|[:=])"
            r"\s{0,8}[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
    ),
    _Detector(
        "an AWS access key id",
        ("AKIA", "ASIA"),
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    ),
    _Detector(
        "a GitHub token",
        ("gh", "github_pat_"),
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_\w{20,255})(?!\w)", re.ASCII),
    ),
    _Detector(
        "an Anthropic API key",
        ("sk-ant-",),
        re.compile(rf"(?<![{_TOKEN}])sk-ant-([{_TOKEN}]{{20,400}})"),
        _letters_and_digits,
    ),
    _Detector(
        "an OpenAI API key",
        ("sk-",),
        re.compile(rf"(?<![{_TOKEN}])sk-(?:proj|svcacct|admin)-([{_TOKEN}]{{20,400}})"),
        _letters_and_digits,
    ),
    _Detector(
        "an OpenAI API key",
        ("sk-",),
        re.compile(rf"(?<![{_TOKEN}])sk-([{_TOKEN}]{{20,400}})"),
        _mixed_token,  # plain "sk-" also starts words like sk-learn-compatible
    ),
    _Detector(
        "a Stripe secret key",
        ("_live_", "_test_", "_prod_"),
        re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,255}"),
    ),
    _Detector(
        "a Slack token",
        ("xox", "xapp-"),
        re.compile(rf"(?<![{_TOKEN}])(?:xox[abposr]|xapp)-[A-Za-z0-9-]{{10,255}}"),
    ),
    _Detector(
        "a Slack token",
        ("xoxe",),
        re.compile(r"(?<![A-Za-z0-9_-])xoxe(?:\.xox[a-z])?-\d-[A-Za-z0-9]{40,255}"),  # rotating refresh tokens
    ),
    _Detector(
        "a webhook URL with its secret",
        ("hooks.slack.com/",),
        re.compile(
            r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9]{6,20}/[A-Za-z0-9]{6,20}/([A-Za-z0-9]{16,64})"
        ),
    ),
    _Detector(
        "a webhook URL with its secret",
        ("/api/webhooks/",),
        re.compile(
            r"(?i:discord(?:app)?\.com|canary\.discord\.com|ptb\.discord\.com)/api/webhooks/\d{15,22}/([A-Za-z0-9_-]{40,100})"
        ),
    ),
    _Detector(
        "a webhook URL with its secret",
        ("webhook.office.com", "outlook.office.com/webhook"),
        re.compile(
            r"(?i:webhook\.office\.com/webhookb2|outlook\.office\.com/webhook)/[A-Za-z0-9@-]{36,120}/IncomingWebhook/([0-9a-fA-F]{32})"
        ),
    ),
    _Detector(
        "a webhook URL with its secret",
        ("?", "&"),
        # a secret in a URL's query: ?token=..., &sig=..., ?code=... (Azure Functions), ?key=...
        re.compile(
            r"[?&](?i:token|access_token|api_key|apikey|key|secret|sig|signature|code|auth|password|pwd)"
            rf"=([%.~+/{_TOKEN}]{{16,512}})"
        ),
        _mixed_token,
    ),
    _Detector(
        "a Twilio API key",
        ("SK",),
        re.compile(r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
        _letters_and_digits,
    ),
    _Detector(
        "a Twilio account SID",
        ("AC",),
        re.compile(r"(?<![A-Za-z0-9])AC[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
        _letters_and_digits,
    ),
    _Detector(
        "a Stripe webhook secret",
        ("whsec_",),
        re.compile(r"(?<![A-Za-z0-9_])whsec_[A-Za-z0-9]{24,128}"),
    ),
    _Detector(
        "a SendGrid API key",
        ("SG.",),
        re.compile(rf"(?<![{_TOKEN}])SG\.[{_TOKEN}]{{16,32}}\.[{_TOKEN}]{{30,64}}"),
    ),
    _Detector(
        "a Mailgun API key",
        ("key-",),
        re.compile(r"(?<![A-Za-z0-9_-])key-[0-9a-f]{32}(?![A-Za-z0-9])"),
        _letters_and_digits,
    ),
    _Detector(
        "an npm token",
        ("npm_",),
        re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
        _letters_and_digits,
    ),
    _Detector(
        "a PyPI token",
        ("pypi-",),
        re.compile(rf"(?<![{_TOKEN}])pypi-AgE[{_TOKEN}]{{50,512}}"),
    ),
    _Detector(
        "a Discord bot token",
        (".",),
        # base64 of the bot's numeric id (starts M, N or O), a timestamp, then the HMAC
        re.compile(
            r"(?<![A-Za-z0-9_.-])[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}(?![A-Za-z0-9_-])"
        ),
        _letters_and_digits,
    ),
    _Detector(
        "a Telegram bot token",
        (":AA",),
        re.compile(r"(?<![A-Za-z0-9:])\d{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])"),
    ),
    _Detector(
        "an Azure storage key",
        ("accountkey=", "sharedaccesskey="),
        re.compile(r"(?i:AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{40,100}={0,2})"),
        _letters_and_digits,
    ),
    _Detector(
        "an Azure client secret",
        ("Q~",),
        re.compile(r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
    ),
    _Detector(
        "a Google Cloud credential",
        ("GOCSPX-", "ya29.", "private_key_id"),
        re.compile(
            r"GOCSPX-[A-Za-z0-9_-]{28}|(?<![A-Za-z0-9_.-])ya29\.[A-Za-z0-9_-]{20,2048}"
            r"|\"private_key_id\"\s{0,8}:\s{0,8}\"[0-9a-f]{40}\""
        ),
    ),
    _Detector(
        "a GitLab token",
        (
            "glpat-",
            "gldt-",
            "glrt-",
            "glptt-",
            "glsoat-",
            "glft-",
            "glimt-",
            "glagent-",
            "gloas-",
            "glffct-",
            "glcbt-",
            "GR1348941",
        ),  # fmt: skip
        re.compile(
            r"(?<![A-Za-z0-9_-])(?:gl(?:pat|dt|rt|ptt|soat|ft|imt|agent|oas|ffct)-[A-Za-z0-9_.-]{20,300}"
            r"|glcbt-[A-Za-z0-9]{1,5}_[A-Za-z0-9_-]{20,64}|GR1348941[A-Za-z0-9_-]{20,64})"
        ),
    ),
    _Detector(
        "a Hugging Face token",
        ("hf_", "api_org_"),
        re.compile(r"(?<![A-Za-z0-9_])(?:hf_[A-Za-z0-9]{34,40}|api_org_[A-Za-z]{34})(?![A-Za-z0-9])"),
    ),
    _Detector(
        "a Google API key",
        ("AIza",),
        re.compile(rf"(?<![{_TOKEN}])AIza[{_TOKEN}]{{35}}(?![{_TOKEN}])"),
    ),
    _Detector(
        "a JSON Web Token",
        ("eyJ",),
        re.compile(rf"(?<![{_TOKEN}])eyJ[{_TOKEN}]{{8,4096}}\.[{_TOKEN}]{{8,8192}}\.[{_TOKEN}]{{8,4096}}"),
    ),
    _Detector(
        "a bearer token",
        ("bearer",),
        re.compile(r"(?<![A-Za-z0-9_])(?i:bearer)[ \t]{1,8}([A-Za-z0-9._~+/=-]{20,4096})"),
        _letters_and_digits,
    ),
    _Detector(
        "a password in a URL",
        ("://",),
        re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@]{0,256}:([^\s/@]{1,256})@[^\s/@]"),
        _url_password,
    ),
    _Detector(
        "a secret assigned to a name like password, token or api_key",
        ("pass", "pwd", "secret", "key", "token"),
        re.compile(
            rf"(?<![A-Za-z0-9])(?i:{_ASSIGNED_NAMES})[\"']?[ \t]{{0,8}}(?::=|=>|[:=])[ \t]{{0,8}}[\"'`]?"
            r"([^\s\"'`,;<>]{1,512})"
        ),
        _assigned_secret,
    ),
)


def _prefixed(
    kind: str,
    prefixes: tuple[str, ...],
    body: str,
    accept: Callable[[str], bool] | None = None,
    tail: str = "A-Za-z0-9_",
) -> _Detector:
    """A token that starts with a vendor's fixed prefix: the prefix, not inside a longer word,
    then its body, not followed by more of the same characters (gitleaks' keyword rules)."""
    alternatives = "|".join(re.escape(prefix) for prefix in prefixes)
    return _Detector(kind, prefixes, re.compile(rf"(?<![A-Za-z0-9_.-])(?:{alternatives})({body})(?![{tail}])"),
                     accept)  # fmt: skip


_HEX = "[a-fA-F0-9]"
#: vendors whose tokens carry a fixed prefix, compared with gitleaks' rule set family by family
#: (tests/test_credentials.py holds a positive and near misses for each)
_PREFIXED: tuple[_Detector, ...] = (
    _prefixed("a DigitalOcean token", ("dop_v1_", "doo_v1_", "dor_v1_"), f"{_HEX}{{64}}"),
    _prefixed("a Shopify token", ("shpat_", "shpca_", "shppa_", "shpss_"), f"{_HEX}{{32}}"),
    _prefixed("a Databricks token", ("dapi",), f"{_HEX}{{32}}(?:-\\d)?", _letters_and_digits),
    _prefixed("a Linear API key", ("lin_api_",), "[A-Za-z0-9]{40}", _letters_and_digits),
    _prefixed("a Notion token", ("ntn_",), "[0-9]{11}[A-Za-z0-9]{35}", _letters_and_digits),
    _prefixed("a Notion token", ("secret_",), "[A-Za-z0-9]{43}", _mixed_token),
    _prefixed("a Perplexity API key", ("pplx-",), "[A-Za-z0-9]{48}", _letters_and_digits),
    _prefixed("a Groq API key", ("gsk_",), "[A-Za-z0-9]{52}", _letters_and_digits),
    _prefixed("an xAI API key", ("xai-",), "[A-Za-z0-9]{80}", _letters_and_digits),
    _prefixed("a Replicate token", ("r8_",), "[A-Za-z0-9]{37}", _letters_and_digits),
    _prefixed("a Postman API key", ("PMAK-",), f"{_HEX}{{24}}-{_HEX}{{34}}"),
    _prefixed("a HashiCorp Vault token", ("hvs.", "hvb."), "[A-Za-z0-9_-]{90,300}", _letters_and_digits, "A-Za-z0-9_-"),
    _Detector(
        "a Terraform Cloud token",
        (".atlasv1.",),
        re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{14}\.atlasv1\.([A-Za-z0-9_=-]{60,70})(?![A-Za-z0-9_=-])"),
        _letters_and_digits,
    ),
    _prefixed("a Pulumi token", ("pul-",), f"{_HEX}{{40}}", _letters_and_digits),
    _prefixed("a Sentry token", ("sntryu_",), f"{_HEX}{{64}}"),
    _prefixed("a Sentry token", ("sntrys_eyJ",), "[A-Za-z0-9+/=_]{60,600}", None, "A-Za-z0-9+/=_"),
    _prefixed("a Grafana token", ("glsa_",), f"[A-Za-z0-9]{{32}}_{_HEX}{{8}}"),
    _prefixed("a Grafana token", ("glc_",), "[A-Za-z0-9+/]{32,400}={0,3}", _letters_and_digits, "A-Za-z0-9+/="),
    _prefixed("an age secret key", ("AGE-SECRET-KEY-1",), "[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    _prefixed("a Heroku API key", ("HRKU-AA",), "[A-Za-z0-9_-]{58}", None, "A-Za-z0-9_-"),
    _prefixed("a RubyGems token", ("rubygems_",), f"{_HEX}{{48}}"),
    _prefixed("a Square token", ("sq0atp-", "sq0csp-"), "[A-Za-z0-9_-]{22,60}", _letters_and_digits, "A-Za-z0-9_-"),
    _prefixed("an Atlassian API token", ("ATATT3",), "[A-Za-z0-9_=-]{186}", None, "A-Za-z0-9_=-"),
    _prefixed(
        "a Doppler token",
        ("dp.pt.", "dp.st.", "dp.sa.", "dp.ct.", "dp.scim.", "dp.audit."),
        "[A-Za-z0-9]{40,44}",
        _letters_and_digits,
    ),  # fmt: skip
    _prefixed("a 1Password service account token", ("ops_eyJ",), "[A-Za-z0-9+/]{250,8192}={0,3}", None, "A-Za-z0-9+/="),
    _prefixed("a Fly.io token", ("fo1_",), "[A-Za-z0-9_-]{43}", _letters_and_digits, "A-Za-z0-9_-"),
    _prefixed("a Fly.io token", ("fm1a_", "fm1r_", "fm2_"), "[A-Za-z0-9+/]{100,8192}={0,3}", None, "A-Za-z0-9+/="),
    _prefixed(
        "a PlanetScale token",
        ("pscale_tkn_", "pscale_oauth_", "pscale_pw_"),
        "[A-Za-z0-9_=.-]{32,64}",
        _letters_and_digits,
        "A-Za-z0-9_=.-",
    ),  # fmt: skip
    _prefixed("an Alibaba Cloud access key", ("LTAI",), "[A-Za-z0-9]{20}", _letters_and_digits),
    _prefixed("a Brevo (Sendinblue) API key", ("xkeysib-", "xsmtpsib-"), f"{_HEX}{{64}}-[A-Za-z0-9]{{16}}"),
    _prefixed("a Cloudflare origin CA key", ("v1.0-",), f"{_HEX}{{24}}-{_HEX}{{146}}"),
    _prefixed("a Dynatrace token", ("dt0c01.",), "[A-Za-z0-9]{24}\\.[A-Za-z0-9]{64}"),
    _prefixed("an EasyPost API key", ("EZAK", "EZTK"), "[A-Za-z0-9]{54}", _letters_and_digits),
    _prefixed("a Frame.io token", ("fio-u-",), "[A-Za-z0-9_=-]{64}", None, "A-Za-z0-9_=-"),
    _prefixed("an Infracost token", ("ico-",), "[A-Za-z0-9]{32}", _letters_and_digits),
    _prefixed("a Prefect token", ("pnu_",), "[A-Za-z0-9]{36}", _letters_and_digits),
    _prefixed("a ReadMe API key", ("rdme_",), "[a-z0-9]{70}", _letters_and_digits),
    _prefixed("a Scalingo token", ("tk-us-",), "[A-Za-z0-9_-]{48}", _letters_and_digits, "A-Za-z0-9_-"),
    _prefixed("a Shippo token", ("shippo_live_", "shippo_test_"), f"{_HEX}{{40}}"),
    _prefixed("a Duffel token", ("duffel_live_", "duffel_test_"), "[A-Za-z0-9_=-]{43}", None, "A-Za-z0-9_=-"),
    _prefixed("a Typeform token", ("tfp_",), "[A-Za-z0-9_.=-]{59}", _letters_and_digits, "A-Za-z0-9_.=-"),
    _prefixed("a Sourcegraph token", ("sgp_",), f"(?:{_HEX}{{16}}_|local_)?{_HEX}{{40}}"),
    _prefixed("an Artifactory key", ("AKCp",), "[A-Za-z0-9]{69}", _letters_and_digits),
    _prefixed("a Clojars token", ("CLOJARS_",), "[a-z0-9]{60}", _letters_and_digits),
    _prefixed("an OpenShift token", ("sha256~",), "[A-Za-z0-9_-]{43}", _letters_and_digits, "A-Za-z0-9_-"),
    _prefixed("an Adobe client secret", ("p8e-",), "[A-Za-z0-9]{32}", _letters_and_digits),
    _prefixed("a Mapbox secret token", ("sk.eyJ",), "[A-Za-z0-9_.-]{50,2048}", None, "A-Za-z0-9_.-"),
    _prefixed("a New Relic key", ("NRAK-", "NRII-"), "[A-Za-z0-9-]{27,32}", _letters_and_digits, "A-Za-z0-9-"),
    _Detector(
        "a basic auth header",
        ("basic",),
        re.compile(
            r"(?<![A-Za-z0-9_-])(?i:authorization)[\"']?[ \t]{0,8}:[ \t]{0,8}(?i:basic)[ \t]{1,8}"
            r"([A-Za-z0-9+/]{8,4096}={0,2})(?![A-Za-z0-9+/=])"
        ),
        _letters_and_digits,
    ),
)
_DETECTORS = _DETECTORS + _PREFIXED


def _any_of(needles: set[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(needle) for needle in sorted(needles)))


#: whether a text holds any detector's needle at all, in one scan each (lowercase needles are
#: looked for in the lowered text, the others as written, as each detector looks for its own):
#: most texts hold none, and looking for each of some 200 needles in turn cost a remember 0.1 ms
_ANY_LOWER_NEEDLE = _any_of({n for detector in _DETECTORS for n in detector.needles if n == n.lower()})
_ANY_CASED_NEEDLE = _any_of({n for detector in _DETECTORS for n in detector.needles if n != n.lower()})


def find_credential(text: str) -> str | None:
    """What kind of secret `text` seems to carry (the earliest one), or None. Never the secret itself."""
    best: tuple[int, int] | None = None  # (position, detector order)
    lowered = text.lower()
    if _ANY_LOWER_NEEDLE.search(lowered) is None and _ANY_CASED_NEEDLE.search(text) is None:
        return None  # no detector's pattern can match without its needle
    for order, detector in enumerate(_DETECTORS):
        if not any(n in (lowered if n == n.lower() else text) for n in detector.needles):
            continue
        for match in detector.pattern.finditer(text):
            if best is not None and match.start() > best[0]:
                break
            candidate = match.group(1) if match.lastindex else match.group(0)
            if detector.accept is None or detector.accept(candidate):
                if best is None or match.start() < best[0]:
                    best = (match.start(), order)
                break
    return None if best is None else _DETECTORS[best[1]].kind


def refuse_credentials(text: str, what: str = "text") -> None:
    """Raise CredentialRefused when `text` looks like it carries a secret; `what` names the text."""
    kind = find_credential(text)
    if kind is not None:
        raise CredentialRefused(
            f"{what} looks like it contains {kind}; nothing was written. Remove the secret and try again."
        )
