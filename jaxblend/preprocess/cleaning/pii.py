"""PII scrubbing: e-mail addresses and IP addresses become placeholders.

The patterns follow datatrove's ``PIIFormatter`` (an RFC 5322-style local part and a dotted domain
or a bracketed address literal for e-mails; dotted quads for IPv4, checked with :mod:`ipaddress`),
with IPv6 added: colon-separated hexadecimal groups, accepted only when :mod:`ipaddress` parses
them. Like datatrove, by default only *global* addresses are replaced (``127.0.0.1``,
``192.168.0.1``, ``::1`` are not personal); ``public_ips_only=False`` replaces every valid address.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

EMAIL_PLACEHOLDER = "<EMAIL>"
IP_PLACEHOLDER = "<IP_ADDRESS>"

_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_EMAIL = re.compile(
    rf"\b{_ATOM}(?:\.{_ATOM})*@(?:(?:{_LABEL}\.)+{_LABEL}|\[(?:{_OCTET}\.){{3}}{_OCTET}\])"
)
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|:)?(?![\w:])")


@dataclasses.dataclass
class PIICounts:
    """Replacements made, by kind."""

    email: int = 0
    ipv4: int = 0
    ipv6: int = 0


class Scrubber:
    """Replaces e-mails and IP addresses in texts (see the module docstring)."""

    def __init__(self, public_ips_only: bool = True) -> None:
        self.public_ips_only = public_ips_only

    def _ip_ok(self, candidate: str) -> bool:
        try:
            ip = ipaddress.ip_address(candidate)
        except ValueError:
            return False
        return ip.is_global or not self.public_ips_only

    def scrub(self, text: str, counts: PIICounts) -> str:
        """Returns ``text`` with its PII replaced; adds the replacements to ``counts``."""
        if "@" in text:
            text, n = _EMAIL.subn(EMAIL_PLACEHOLDER, text)
            counts.email += n
        if "." in text:
            text = self._sub_ips(_IPV4, text, counts, "ipv4")
        if ":" in text:
            text = self._sub_ips(_IPV6, text, counts, "ipv6")
        return text

    def _sub_ips(self, pattern: re.Pattern[str], text: str, counts: PIICounts, kind: str) -> str:
        def repl(m: re.Match[str]) -> str:
            if not self._ip_ok(m.group(0)):
                return m.group(0)
            setattr(counts, kind, getattr(counts, kind) + 1)
            return IP_PLACEHOLDER

        return pattern.sub(repl, text)
