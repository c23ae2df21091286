"""Credential refusal: what counts as a secret, what is ordinary prose, and that the check is bounded."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.vault import credentials
from memvault.vault.credentials import find_credential, refuse_credentials
from memvault.vault.errors import CredentialRefused

# Fake but well-formed secrets; assembled from parts so no scanner mistakes this file for a leak.
OPENAI_LEGACY = "sk-" + "T3BlbkFJ" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0"
OPENAI_PROJECT = "sk-proj-" + "Xy9_" * 10 + "T3BlbkFJ" + "-Ab3" * 10
ANTHROPIC = "sk-ant-api03-" + "Zq8-" * 20 + "AA"
GITHUB_CLASSIC = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_FINE = "github_pat_" + "11ABCDEFG0123456789_" + "abcdefghijklmnopqrstuvwxyz0123456789"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GOOGLE = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RESTRICTED = "rk_live_" + "51H8abcdEFGH1234ijkl"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
AWS_ID = "AKIA" + "IOSFODNN7QWERTYU"
AWS_SESSION_ID = "ASIA" + "Y34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Hd3kE2m"  # 40 chars
PEM_HEADER = "-----BEGIN " + "RSA PRIVATE KEY-----"

POSITIVES = [
    (PEM_HEADER + "\nMIIEowIBAAKCAQEA...\n-----END RSA PRIVATE KEY-----", "a private key block"),
    ("-----BEGIN " + "OPENSSH PRIVATE KEY-----", "a private key block"),
    ("-----BEGIN " + "PRIVATE KEY-----", "a private key block"),
    ("-----BEGIN " + "ENCRYPTED PRIVATE KEY-----", "a private key block"),
    ("-----BEGIN " + "PGP PRIVATE KEY BLOCK-----", "a private key block"),
    (f"the deploy user is {AWS_ID}", "an AWS access key id"),
    (f"temporary creds {AWS_SESSION_ID} expire at noon", "an AWS access key id"),
    (f"aws_secret_access_key = {AWS_SECRET}", "an AWS secret access key"),
    (f'AWS_SECRET_ACCESS_KEY="{AWS_SECRET}"', "an AWS secret access key"),
    (f'"SecretAccessKey": "{AWS_SECRET}"', "an AWS secret access key"),
    (f"token {GITHUB_CLASSIC} for CI", "a GitHub token"),
    ("gho_" + GITHUB_CLASSIC[4:], "a GitHub token"),
    ("ghu_" + GITHUB_CLASSIC[4:], "a GitHub token"),
    ("ghs_" + GITHUB_CLASSIC[4:], "a GitHub token"),
    ("ghr_" + GITHUB_CLASSIC[4:], "a GitHub token"),
    (GITHUB_FINE, "a GitHub token"),
    (f"use {OPENAI_LEGACY} for the bot", "an OpenAI API key"),
    (OPENAI_PROJECT, "an OpenAI API key"),
    ("sk-svcacct-" + "Ab3_" * 8, "an OpenAI API key"),
    (ANTHROPIC, "an Anthropic API key"),
    (f"slack bot: {SLACK}", "a Slack token"),
    ("xoxp-" + "1234-5678-abcdefghij", "a Slack token"),
    (f"maps key {GOOGLE}.", "a Google API key"),
    (STRIPE, "a Stripe secret key"),
    (STRIPE_RESTRICTED, "a Stripe secret key"),
    ("sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc", "a Stripe secret key"),
    (f"session cookie {JWT}", "a JSON Web Token"),
    ("Authorization: Bearer " + "abcdef0123456789abcdef0123456789", "a bearer token"),
    ("curl -H 'authorization: bearer " + "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5'", "a bearer token"),
    ("postgres://admin:hunter2@db.internal:5432/app", "a password in a URL"),
    ("https://morgan:Tr0ub4dor&3@example.com/", "a password in a URL"),
    ("redis://:s3cretPass@cache:6379", "a password in a URL"),
    ("password = Tr0ub4dor&3", "a secret assigned to a name like password, token or api_key"),
    ("DB_PASSWORD=correcthorsebatterystaple", "a secret assigned to a name like password, token or api_key"),
    ('api_key: "abcd1234efgh"', "a secret assigned to a name like password, token or api_key"),
    ('{"apiKey": "9f8e7d6c5b4a"}', "a secret assigned to a name like password, token or api_key"),
    ("secret=s3cr3tvalue", "a secret assigned to a name like password, token or api_key"),
    ("token=abc123def456", "a secret assigned to a name like password, token or api_key"),
    ("GITHUB_TOKEN=q1w2e3r4t5y6", "a secret assigned to a name like password, token or api_key"),
    ("client_secret: 8c1a-77fe-19b0", "a secret assigned to a name like password, token or api_key"),
    ("accessToken := 'Zx81-qq72-mm09'", "a secret assigned to a name like password, token or api_key"),
    ("pwd: p4ssw0rd!", "a secret assigned to a name like password, token or api_key"),
]

NEGATIVES = [
    "I forgot my password",
    "I forgot my password again, reset it tomorrow.",
    "the token bucket algorithm limits bursts",
    "we use sk-learn for the baseline",
    "the sk-learn-compatible-estimator-wrapper-thing",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
    "request id 550e8400-e29b-41d4-a716-446655440000",
    "standup at 09:14, then lunch at 12:30",
    "password: <your-key>",
    "api_key = <your-api-key-here>",
    "api_key = ***",
    "password = ********",
    "token: xxx",
    "password=xxxxxxxxxx",
    "secret: your-secret-here",
    "Token: rotation happens daily",
    "Password: I forgot it",
    "the secret: we moved standup to Thursday",
    "the session token expires: 2026-11-30",
    "password = os.environ['DB_PASSWORD']",
    "password: ${DB_PASSWORD}",
    "TOKEN = get_token()",
    "the password policy: minimum 12 characters",
    "http://localhost:11434",
    "ssh://git@github.com/example/repo",
    "postgres://user:password@host/db",
    "postgres://user:<password>@host/db",
    "Bearer of bad news and good tidings arrived",
    "the bearer token goes in the Authorization header",
    "aws access key rotated on Monday",
    "AKIA is the prefix of AWS access key ids",
    "eyJ is how base64 JSON starts",
    "Morgan chose blue as the deployment color.",
    "-----BEGIN PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----",
    "token_count: 12345678",
    "password expiry: 2026-11-30",
    "password: 2026-11-30",
    "passport number was renewed",
    "",
]


@pytest.mark.parametrize(("text", "kind"), POSITIVES)
def test_detects_credentials(text: str, kind: str | None) -> None:
    assert find_credential(text) == kind


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_is_not_a_credential(text: str) -> None:
    assert find_credential(text) is None


def test_description_never_contains_the_secret() -> None:
    for text, kind in POSITIVES:
        found = find_credential(text)
        if kind is not None:
            assert found is not None
            secrets = [p for p in text.replace("=", " ").split() if len(p) >= 8 and any(c.isdigit() for c in p)]
            assert not any(secret in found for secret in secrets)


def test_first_credential_by_position_wins() -> None:
    assert find_credential(f"{STRIPE} then {GITHUB_CLASSIC}") == "a Stripe secret key"
    assert find_credential(f"{GITHUB_CLASSIC} then {STRIPE}") == "a GitHub token"


def test_anthropic_key_is_named_as_anthropic_not_openai() -> None:
    assert find_credential(f"key: {ANTHROPIC}") == "an Anthropic API key"


def test_refuse_credentials_message_and_no_echo() -> None:
    with pytest.raises(CredentialRefused) as info:
        refuse_credentials(f"remember that the deploy key is {OPENAI_LEGACY}", "the fact")
    assert str(info.value) == (
        "the fact looks like it contains an OpenAI API key; nothing was written. Remove the secret and try again."
    )
    assert OPENAI_LEGACY not in str(info.value)


def test_refuse_credentials_default_name_and_clean_text() -> None:
    with pytest.raises(CredentialRefused, match=r"^text looks like it contains a GitHub token;"):
        refuse_credentials(GITHUB_CLASSIC)
    assert refuse_credentials("Morgan chose blue as the deployment color.") is None


def test_secret_after_a_megabyte_of_text_is_found() -> None:
    padding = "ordinary notes about the rollout. " * 40_000  # > 1 MiB
    assert len(padding) > 1024 * 1024
    assert find_credential(padding + STRIPE) == "a Stripe secret key"
    assert find_credential(padding) is None


@pytest.mark.parametrize(
    "hostile",
    [
        "-eyJ" * 300_000,
        "sk-" * 400_000,
        "x://" * 300_000,
        "a:" * 600_000,
        "Bearer " * 200_000,
        "password=" * 150_000,
        ("a" * 255 + ":") * 5_000,
        "-----BEGIN " * 100_000,
        "ghp_" * 300_000,
        "AIza" * 300_000,
        "secret_access_key= " * 60_000,
        "a" * 2_000_000,
    ],
)
def test_hostile_inputs_finish(hostile: str) -> None:
    # Each would take hours with a backtracking pattern; a linear scan answers in well under a second.
    result = find_credential(hostile)
    assert result is None or isinstance(result, str)


def test_assignment_runs_are_detected_not_just_scanned() -> None:
    assert find_credential("password=" * 1000) is not None  # the value is a long non-placeholder string


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_detection_never_raises(text: str) -> None:
    result = find_credential(text)
    assert result is None or isinstance(result, str)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="sk-_AIzaeyJ.:/@=pPassword tokenBEGIN0123456789xob", max_size=400))
def test_detection_never_raises_on_near_misses(text: str) -> None:
    result = find_credential(text)
    assert result is None or isinstance(result, str)


# --- the common families beyond the big providers: one positive each and near misses ------------
# (fake values, assembled from parts so no scanner mistakes this file for a leak)
HEX32 = "0123456789abcdef" + "fedcba9876543210"
WEBHOOK = "a webhook URL with its secret"
FAMILIES = [
    ("https://hooks.slack.com/services/" + "T0AB12CDE/B0FG34HIJ/" + "aB3dE5gH7jK9mN1pQ3sT5vX7", WEBHOOK),
    (
        "post to hooks.slack.com/workflows/"
        + "T0AB12CDE/A0FG34HIJ/"
        + "123456789012345678/"
        + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2",
        WEBHOOK,
    ),
    (
        "https://discord.com/api/webhooks/"
        + "112233445566778899/"
        + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6kM8oQ0sU2wY4_-aB3dE5gH7jK9mN1pQ3sT5v",
        WEBHOOK,
    ),
    (
        "https://contoso.webhook.office.com/webhookb2/"
        + "0c3a9f9e-1b2c-4d5e-8f90-123456789abc@72f988bf-86f1-41af-91ab-2d7cd011db47"
        + "/IncomingWebhook/"
        + HEX32
        + "/0c3a9f9e-1b2c-4d5e-8f90-123456789abc",
        WEBHOOK,
    ),
    ("https://example.azurewebsites.net/api/hook?code=" + "Ab3De5Gh7Jk9Mn1Pq3St5Vx7==", WEBHOOK),
    ("https://api.example.com/notify?channel=ops&token=" + "q1W2e3R4t5Y6u7I8o9P0", WEBHOOK),
    ("twilio key " + "SK" + HEX32, "a Twilio API key"),
    ("twilio account " + "AC" + HEX32, "a Twilio account SID"),
    ("slack app token " + "xapp-1-" + "A0123456789-1234567890123-" + HEX32, "a Slack token"),
    ("slack bot " + "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "a Slack token"),
    ("slack user " + "xoxp-" + "123456789012-123456789012-1234567890123-" + HEX32, "a Slack token"),
    (
        "slack refresh " + "xoxe.xoxp-1-" + "Mi0yLTEyMzQ1Njc4OTAxMi0xMjM0NTY3ODkwMTIzLTEyMzQ1Njc4OTAxMjM0",
        "a Slack token",
    ),
    ("rk_live_" + "51H8abcdEFGH1234ijklMNOP", "a Stripe secret key"),
    ("rk_test_" + "51H8abcdEFGH1234ijklMNOP", "a Stripe secret key"),
    ("whsec_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2c", "a Stripe webhook secret"),
    ("SG." + "aB3dE5gH7jK9mN1pQ3sT5v" + "." + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0Ed9Cb8Az7Yx6W", "a SendGrid API key"),
    ("mailgun " + "key-" + HEX32, "a Mailgun API key"),
    (
        "npm config set //registry.npmjs.org/:_authToken " + "npm_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6kM8",
        "an npm token",
    ),
    ("pypi-AgEIcHlwaS5vcmc" + "CJDk5ZTQ0NjEtN2Q2Ny00ZWQ0LWFhNjEtYTgxMjg5MWE2ZTc3AAIqWzMsIjE", "a PyPI token"),
    (
        "discord bot " + "MTA5ODc2NTQzMjEwOTg3NjU0Mw" + ".GaB3dE" + ".aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6k",
        "a Discord bot token",
    ),
    ("telegram " + "123456789:AA" + "Fq3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6", "a Telegram bot token"),
    (
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey="
        + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6kM8oQ0sU2wY4aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6kM8oQ0s==;",
        "an Azure storage key",
    ),
    (
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey="
        + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6kM8oQ0sU2w=",
        "an Azure storage key",
    ),
    ("azure client secret " + "aB3" + "8Q~" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6k", "an Azure client secret"),
    ('"private_key_id": "' + HEX32 + "01234567" + '"', "a Google Cloud credential"),
    ("oauth client " + "GOCSPX-" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2c", "a Google Cloud credential"),
    ("access " + "ya29." + "a0AfH6SMBx3dE5gH7jK9mN1pQ3sT5v", "a Google Cloud credential"),
    ("glpat-" + "aB3dE5gH7jK9mN1pQ3sT", "a GitLab token"),
    ("hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH", "a Hugging Face token"),
    ("postgresql://app:Zq81xx0pLm@db.internal:5432/prod", "a password in a URL"),
    ("mongodb+srv://svc:Pw4mongo9981@cluster0.example.net/app", "a password in a URL"),
    ("mysql://root:r00tPassw0rd@127.0.0.1:3306/shop", "a password in a URL"),
    (
        "jdbc:postgresql://db:5432/app?user=app&password=" + "Zq81xx0pLm99Kk",
        "a secret assigned to a name like password, token or api_key",
    ),
]

NEAR_MISSES = [
    "https://hooks.slack.com/services/",  # the docs page, no secret
    "configure hooks.slack.com/services/T0AB12CDE in the app",
    "https://discord.com/api/webhooks/ is where webhooks live",
    "https://example.com/search?q=deployment+color&page=2",
    "https://example.com/?token=rotation",
    "SKU" + "0123456789abcdef",  # a product code
    "SK" + "0123456789abcdef",  # too short for a Twilio key
    "ACME" + HEX32[:20],
    "the account SID starts with AC",
    "whsec_ is the prefix Stripe uses",
    "SG.1 is the first sprint goal",
    "key-value stores such as redis",
    "key-" + "0123",
    "npm_config_cache is an environment variable",
    "pip install pypi-simple",
    "version 1.2.3 released at 12:30",
    "meeting 123456789:30",
    "AccountKey=<your key>",
    "AccountKey=${AZURE_KEY}",
    "GOCSPX- prefixes Google client secrets",
    "ya29. tokens expire in an hour",
    "glpat- tokens are personal",
    "hf_hub_download fetches model files",
    "postgresql://app:password@db/prod",
    "postgresql://app@db.internal:5432/prod",
    "mysql://localhost:3306/shop",
    "Q~ is not a secret by itself",
    "M.Sc. in C.S. from 2019.",
    "File Nov2026Report_Final.v2.docx is attached",
]


@pytest.mark.parametrize(("text", "kind"), FAMILIES)
def test_each_common_family_is_refused(text: str, kind: str) -> None:
    assert find_credential(text) == kind
    with pytest.raises(CredentialRefused):
        refuse_credentials(text, "the fact")


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_of_each_family_are_prose(text: str) -> None:
    assert find_credential(text) is None


@pytest.mark.parametrize(
    "hostile",
    [
        "?token=" * 200_000,
        "hooks.slack.com/services/" * 50_000,
        "SK" * 600_000,
        "M" * 30 + ".abcdef." * 150_000,
        "1234567890:AA" * 100_000,
        "AccountKey=" * 100_000,
        "aaa1Q~" * 200_000,
        "/api/webhooks/1" * 100_000,
    ],
)
def test_new_families_stay_linear_on_hostile_runs(hostile: str) -> None:
    result = find_credential(hostile)
    assert result is None or isinstance(result, str)


# --- issue 24: the families gitleaks knows that were stored verbatim, and every write path -------
# (fake values, assembled from parts; each family was compared with gitleaks' rule of that name)
HEX64 = HEX32 * 2
MIXED = "aB3dE5gH7jK9mN1pQ3sT"  # 20 characters, letters and digits
HF_WITH_DIGITS = "hf_" + "aB3DeFgHiJkLmNoPqRs7uVwXyZaBcDeFgH"
DIGITALOCEAN = "dop_v1_" + HEX64
SHOPIFY = "shpat_" + HEX32
GITLEAKS_FAMILIES = [
    (f"HF token {HF_WITH_DIGITS}", "a Hugging Face token"),
    ("api_org_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH", "a Hugging Face token"),
    (f"doctl auth init -t {DIGITALOCEAN}", "a DigitalOcean token"),
    ("doo_v1_" + HEX64, "a DigitalOcean token"),
    ("dor_v1_" + HEX64, "a DigitalOcean token"),
    (f"the Shopify admin app uses {SHOPIFY}", "a Shopify token"),
    ("shpss_" + HEX32, "a Shopify token"),
    ("shpca_" + HEX32, "a Shopify token"),
    ("shppa_" + HEX32, "a Shopify token"),
    ("sk-ant-admin01-" + "Zq8-" * 23 + "xAA", "an Anthropic API key"),
    ("sk_prod_" + "4eC39HqLyjWDarjtT1zdp7dc", "a Stripe secret key"),
    ("glptt-" + HEX32 + "01234567", "a GitLab token"),
    ("glsoat-" + MIXED, "a GitLab token"),
    ("glft-" + MIXED, "a GitLab token"),
    ("glcbt-64_" + MIXED, "a GitLab token"),
    ("GR1348941" + MIXED, "a GitLab token"),
    ("dapi" + HEX32, "a Databricks token"),
    ("lin_api_" + MIXED * 2, "a Linear API key"),
    ("ntn_" + "12345678901" + (MIXED * 2)[:35], "a Notion token"),
    ("secret_" + (MIXED * 3)[:43], "a Notion token"),
    ("pplx-" + (MIXED * 3)[:48], "a Perplexity API key"),
    ("gsk_" + (MIXED * 3)[:52], "a Groq API key"),
    ("xai-" + MIXED * 4, "an xAI API key"),
    ("r8_" + (MIXED * 2)[:37], "a Replicate token"),
    ("PMAK-" + HEX32[:24] + "-" + (HEX32 * 2)[:34], "a Postman API key"),
    ("hvs." + MIXED * 5, "a HashiCorp Vault token"),
    ("abcdefghij1234.atlasv1." + (MIXED * 4)[:65], "a Terraform Cloud token"),
    ("pul-" + HEX32 + "01234567", "a Pulumi token"),
    ("sntryu_" + HEX64, "a Sentry token"),
    ("glsa_" + (MIXED * 2)[:32] + "_" + HEX32[:8], "a Grafana token"),
    ("AGE-SECRET-KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58], "an age secret key"),
    ("HRKU-AA" + (MIXED * 3)[:58], "a Heroku API key"),
    ("rubygems_" + (HEX32 * 2)[:48], "a RubyGems token"),
    ("sq0atp-" + MIXED + "5v", "a Square token"),
    ("ATATT3" + (MIXED * 10)[:186], "an Atlassian API token"),
    ("dp.pt." + (MIXED * 3)[:43], "a Doppler token"),
    ("ops_eyJ" + MIXED * 13, "a 1Password service account token"),
    ("fo1_" + (MIXED * 3)[:43], "a Fly.io token"),
    ("pscale_tkn_" + (MIXED * 2)[:32], "a PlanetScale token"),
    ("LTAI" + MIXED, "an Alibaba Cloud access key"),
    ("xkeysib-" + HEX64 + "-" + MIXED[:16], "a Brevo (Sendinblue) API key"),
    ("dt0c01." + (MIXED * 2)[:24] + "." + HEX64, "a Dynatrace token"),
    ("sgp_" + HEX32[:16] + "_" + HEX32 + "01234567", "a Sourcegraph token"),
    ("shippo_live_" + HEX32 + "01234567", "a Shippo token"),
    ("sha256~" + (MIXED * 3)[:43], "an OpenShift token"),
    ("sk.eyJ1Ijoi" + MIXED * 4, "a Mapbox secret token"),
    ("NRAK-" + (MIXED * 2)[:27], "a New Relic key"),
    ("curl -H 'Authorization: Basic " + "YWRtaW46aHVudGVyMg==" + "'", "a basic auth header"),
]

GITLEAKS_NEAR_MISSES = [
    "hf_hub_download(repo_id='gpt2') fetches a file",
    "hf_" + "short1234",
    "api_org_chart_v2 is the new layout",
    "dop_v1_ is the prefix of DigitalOcean tokens",
    "dop_v1_" + HEX32,  # too short
    "shpat_" + HEX32[:31],  # one digit short
    "shpat_ tokens come from a custom app",
    "dapibus lorem ipsum dolor",
    "lin_api_ keys live under Settings",
    "ntn_ is Notion's prefix now",
    "secret_santa_list_for_the_team_party_this_year",
    "pplx-api is the Perplexity endpoint",
    "gsk_ignore_case is a flag",
    "xai-grok-2 is a model name",
    "r8_ is Replicate's prefix",
    "PMAK- keys are Postman's",
    "hvs. tokens are Vault service tokens",
    "pul-request review",
    "sntryu_ and sntrys_ are Sentry's prefixes",
    "glsa_ and glc_ are Grafana's",
    "AGE-SECRET-KEY-1 starts an age identity",
    "sq0atp- is Square's prefix",
    "ATATT3 starts Atlassian tokens",
    "dp.pt. prefixes Doppler personal tokens",
    "LTAI prefixes Alibaba keys",
    "sha256~ prefixes OpenShift tokens",
    "sha256 of the file is " + HEX64,
    "Authorization: Basic auth is turned off",
    "the basic plan costs 5 euros",
    "v1.0-release notes are out",
    "tk-us-east-1 is the region",
]


@pytest.mark.parametrize(("text", "kind"), GITLEAKS_FAMILIES)
def test_gitleaks_families_are_refused(text: str, kind: str) -> None:
    assert find_credential(text) == kind


@pytest.mark.parametrize("text", GITLEAKS_NEAR_MISSES)
def test_gitleaks_near_misses_are_prose(text: str) -> None:
    assert find_credential(text) is None


@pytest.mark.parametrize(
    "hostile",
    [
        "dop_v1_" * 200_000,
        "shpat_" + "a" * 1_000_000,
        "dapi" * 300_000,
        "hvs." * 300_000,
        "ops_eyJ" * 200_000,
        "A" * 14 + ".atlasv1." * 100_000,
        "Authorization: Basic " * 60_000,
        "a" * 14 + ".atlasv1." + "b" * 1_000_000,
    ],
)
def test_the_gitleaks_families_stay_linear_on_hostile_runs(hostile: str) -> None:
    result = find_credential(hostile)
    assert result is None or isinstance(result, str)


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "secret", [HF_WITH_DIGITS, DIGITALOCEAN, SHOPIFY], ids=["huggingface", "digitalocean", "shopify"]
)
def test_every_write_path_refuses_the_reported_families(tmp_path, secret: str) -> None:
    """remember, admit, capture (direct text and the model's output), runtime memory and
    documents each refuse the three families that were stored verbatim, writing nothing."""
    from memvault import MemoryStore
    from memvault.indexer.services.capture import direct_record
    from memvault.vault.capture.fields import unsafe_text_problem
    from memvault.vault.documents.store import DocumentStore
    from memvault.vault.runtime.entries import normalize_entry
    from tests.intake_helpers import START, admit, make_vault

    text = f"the deploy credential is {secret} for prod"
    root = make_vault(tmp_path)
    with MemoryStore.open(root) as store:
        with pytest.raises(CredentialRefused):
            store.remember(text)
    assert not list((root / "daily").rglob("*.md"))
    result = admit(root, "run-1", answer=text)
    assert (result.status, result.reason) == ("failed", "credential_refused") and secret not in result.message
    with pytest.raises(CredentialRefused):
        direct_record(text, START, START)
    assert "looks like it contains" in unsafe_text_problem(text, 500)
    with pytest.raises(CredentialRefused):
        normalize_entry(text)
    with pytest.raises(CredentialRefused):
        DocumentStore(tmp_path / "docs").create("Runbook", text)
    assert not (tmp_path / "docs" / "documents").exists() or not list((tmp_path / "docs" / "documents").glob("*.md"))


_NEEDLES = sorted({needle for detector in credentials._DETECTORS for needle in detector.needles})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_NEEDLES),
            st.sampled_from([n.upper() for n in _NEEDLES]),
            st.text(alphabet="aAbB0123456789_-=:'\" .xyzXYZ/+~", max_size=70),
        ),
        max_size=8,
    )
)
def test_the_one_scan_for_any_needle_answers_as_looking_for_each_would(parts):
    """A text without any detector's needle is answered at once; with one, every detector looks
    as before. Both answer alike on texts made of needles, their capitals and token-like runs."""
    text = "".join(parts)
    quick = credentials.find_credential(text)
    always = re.compile("")  # matches everywhere: every detector is asked, as before the scan
    saved = credentials._ANY_LOWER_NEEDLE, credentials._ANY_CASED_NEEDLE
    credentials._ANY_LOWER_NEEDLE = credentials._ANY_CASED_NEEDLE = always
    try:
        assert quick == credentials.find_credential(text)
    finally:
        credentials._ANY_LOWER_NEEDLE, credentials._ANY_CASED_NEEDLE = saved
