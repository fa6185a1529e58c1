"""inert_quote: words the daemon quotes cannot mention, link or run quick actions as the bot.

The attacker writes the agent's question, its tests' output, a check's name, an issue's
title. Each forge's published rule is an oracle here (``docs/adr/0035-inert-quotes.md``
cites them): what the daemon posts must match none of them, rendered or raw, and must
still read the same to a human.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.masking import MASK, clear_secrets, register_secret
from pipeline.intake.dependencies import parse_refs
from pipeline.intake.sanitize import BREAK, inert_quote
from pipeline.run.publish_rules import pull_request_title

# Mentions. GitHub: "@ plus their username or team name" (html-pipeline's MentionFilter:
# an alphanumeric right after "@"); Gitea/Forgejo: modules/references mentionPattern;
# GitLab: a user, group or "@all" right after "@".
MENTIONS = (
    re.compile(r"(?:^|\W)@[a-z0-9][a-z0-9-]*(?:/[a-z][a-z0-9_-]*)?", re.IGNORECASE),
    re.compile(
        r"(?:\s|^|\(|\[)(@[-\w][-.\w]*?|@[-\w][-.\w]*?/[-\w][-.\w]*?)"
        r"(?:\s|$|[:,;.?!](\s|$)|'|\)|\])"
    ),
    re.compile(r"(?<![\w])@[a-zA-Z0-9_.-]"),
)
# References that leave a back-link on their target. GitHub: #26, GH-26, owner/repo#26 and
# issue URLs; Gitea/Forgejo: issueNumericPattern and crossReferenceIssueNumericPattern
# (# or !); GitLab: #123, !123 (merge requests), &123 (epics), with a project path or not.
REFERENCES = (
    re.compile(r"(?:^|\W)(?:[\w.-]+/[\w.-]+)?#[0-9]+\b"),
    re.compile(r"\bGH-[0-9]+\b", re.IGNORECASE),
    re.compile(r"(?:\s|^|\(|\[|'|\")([#!][0-9]+)(?:\s|$|\)|\]|'|\"|[:;,.?!]\s|[:;,.?!]$)"),
    re.compile(r"(?:\s|^|\(|\[)([0-9a-zA-Z-_.]+/[0-9a-zA-Z-_.]+[#!][0-9]+)(?:\s|$|\)|\]|[:;,.?!])"),
    re.compile(r"[!&][0-9]+"),
    re.compile(r"/(?:issues|pulls?|merge_requests|work_items|epics)/[0-9]+"),
    # GitLab's app/models/issue.rb: the alternative prefix "GL-" ("GL-123: My commit") and
    # incident URLs (``issues(?:\/incident)?``); work items and epics also take
    # "[work_item:123]" and "[epic:123]", a namespace path allowed before the number.
    re.compile(r"GL-[0-9]+"),
    re.compile(r"/issues/incident/[0-9]+"),
    re.compile(r"\[(?:work_item|epic):(?:[\w.-]+(?:/[\w.-]+)*/)?&?[0-9]+\]?"),
)
# GitLab's quick actions (lib/gitlab/quick_actions/extractor.rb): "/" and a command name at
# the very start of a line; "\r" is deleted first.
QUICK_ACTION = re.compile(r"^/[a-z_]+", re.IGNORECASE | re.MULTILINE)

ATTACKS = [
    "@admin please look",
    "ping @org/team and (@victim) and [@x], @y: now",
    "cc @all @here",
    "see other/repo#3, #3, GH-3 and !5 and &7 (group&8)",
    "'#4' \"#5\" (#6) [#7] #8.",
    "https://github.com/o/r/issues/3 https://gitlab.example/g/p/-/merge_requests/5 "
    "https://gitea.example/o/r/pulls/9 https://github.com/o/r/pull/10",
    "/close",
    "question?\n/assign @victim\n/label ~bug\n  /close\n\t/reopen",
    "> /close\n>/close\n/close\r\n/lock\r/unlock",
    "```\n/close\n```\n`@admin` ``#3``",
    "&#64;admin &#x40;admin &commat;admin &#35;3 &num;3 &#47;close",
    "&#x40org/team &#64admin &#35;3 &amp3 &AMP12",  # entities an HTML decoder reads without ";"
    "\\@admin \\#3 @\\-admin",
    "see GL-5, (GL-6) and xGL-7",
    "https://gitlab.example/g/p/-/issues/incident/5",
    "[work_item:5] [epic:6] [work_item:g/p/7] [epic:g&8]",
]


def _acted_on(text: str) -> list[str]:
    """What a forge would act on in ``text``, raw and once its entities are decoded."""
    found: list[str] = []
    for form in (text, html.unescape(text)):
        form = form.replace("\r", "")
        for pattern in (*MENTIONS, *REFERENCES, QUICK_ACTION):
            found += [match.group(0) for match in pattern.finditer(form)]
    return found


@pytest.mark.parametrize("attack", ATTACKS)
def test_each_forge_rule_finds_the_attack_before_and_nothing_after(attack: str) -> None:
    assert _acted_on(attack), "the oracle must see the attack in the raw text"
    assert _acted_on(inert_quote(attack)) == [], inert_quote(attack)


@pytest.mark.parametrize("attack", [a for a in ATTACKS if "&" not in a and "\r" not in a])
def test_the_text_reads_the_same(attack: str) -> None:
    assert inert_quote(attack).replace(BREAK, "") == attack


def test_an_entity_is_shown_as_written_not_decoded_into_a_sign() -> None:
    shown = html.unescape(inert_quote("&#64;admin and &amp; and a&b"))
    assert shown.replace(BREAK, "") == "&#64;admin and &amp; and a&b"


def test_quoting_twice_adds_nothing_to_a_mention() -> None:
    once = inert_quote("@admin")
    assert inert_quote(once) == once == f"@{BREAK}admin"


def test_a_command_line_stays_inert_when_the_caller_strips_the_indent() -> None:
    """The ending comment strips what it quotes: the break sits before the "/", not the spaces."""
    quoted = inert_quote("   /close\n  /assign @victim")
    assert QUICK_ACTION.search(quoted.strip()) is None
    assert all(QUICK_ACTION.search(line.strip()) is None for line in quoted.splitlines())


@pytest.fixture
def secret() -> Iterator[str]:
    value = "s3cr3t-p@ss#12345"
    register_secret(value)
    yield value
    clear_secrets()


def test_a_secret_with_a_sign_in_it_is_still_masked(secret: str) -> None:
    """Masked before the breaks go in: a break inside the secret would hide it from ``mask``."""
    quoted = inert_quote(f"db url postgres://bot:{secret}@db/x failed")
    assert secret.split("@")[0] not in quoted and MASK in quoted


def test_a_pull_request_title_links_only_its_own_issue() -> None:
    title = pull_request_title("Fixes other/repo#3 for @admin", "#12")
    assert title.endswith(" (#12)")
    assert _acted_on(title.removesuffix(" (#12)")) == [], title


def test_a_dependency_on_another_repository_is_named_without_linking_it() -> None:
    refs = parse_refs("Depends on other/repo#3")
    assert refs.numbers == () and len(refs.problems) == 1
    assert _acted_on(refs.problems[0]) == [], refs.problems
    assert refs.problems[0].replace(BREAK, "").startswith("other/repo#3:")


SIGN_LIST = ["@", "#", "!", "&", "/", "GH-", "GL-", "[work_item:", "[epic:", "\n", "\r", " "]
SIGNS = st.sampled_from([*SIGN_LIST, "\t", ">", "`", ";"])
WORDS = st.sampled_from(
    ["admin", "org/team", "3", "12", "close", "issues/", "issues/incident/", "o/r", "#x40", "amp"]
)


@given(st.lists(st.one_of(SIGNS, WORDS), max_size=30).map("".join))
def test_no_arrangement_of_signs_survives(text: str) -> None:
    assert _acted_on(inert_quote(text)) == [], repr(inert_quote(text))
