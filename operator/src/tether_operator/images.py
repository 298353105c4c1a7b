"""Container image references and the cluster admin's list of allowed images (chart images.allowed).

A reference is `[host[:port]/]path[:tag][@digest]` (the distribution grammar; lowercase path
components). An allowlist entry is compared with the reference as written, never normalised
(`python` is not `docker.io/library/python`: write entries as runs write images):

    registry.example.com/team/      ends in `/`: every repository under that path, any tag or
                                    digest (a host prefix therefore ends at `/`:
                                    `registry.example.com` alone never matches `registry.example.com.evil.io/x`)
    ghcr.io/org/runtime             one repository, any tag or digest (not `ghcr.io/org/runtime-x`)
    ghcr.io/org/runtime:1.2         that tag only (with or without a digest after it)
    ghcr.io/org/runtime@sha256:...  that digest only

The chart renders the same rule into its admission policy's CEL (templates/secret-access-policy.yaml);
the reference itself is checked by the CRD schema (`tether.api.IMAGE_REF`) before that.
"""

from __future__ import annotations

import re

from tether.api import IMAGE_REF

_REFERENCE = re.compile(IMAGE_REF)  # the API's own rule (CRD schema and tether.api)


def is_reference(image: str) -> bool:
    return len(image) <= 512 and _REFERENCE.match(image) is not None


def repository(image: str) -> str:
    """`image` without its tag and digest."""
    name = image.partition("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def matches(image: str, entry: str) -> bool:
    """True if `image` is allowed by one allowlist `entry` (see the module's docstring)."""
    if entry.endswith("/"):
        return image.startswith(entry)
    if image == entry or image.startswith(entry + "@"):
        return True
    # `entry:tag`: the tag may not contain `/` (`ghcr.io/org` + `:5000/evil` is another registry).
    # An entry with a tag or digest gets no second one: `is_reference` refuses such an image.
    return image.startswith(entry + ":") and "/" not in image[len(entry) :]


def refusal(image: str, allowed: tuple[str, ...], field: str) -> str | None:
    """Why `image` (named by `field`) may not run, or None. The reference is checked first: the
    matching above relies on it (no `..`, no second tag, no upper case in paths)."""
    if not is_reference(image):
        return f"{field} {image!r} is not an image reference ([host[:port]/]path[:tag][@digest], lowercase path)"
    if any(matches(image, entry) for entry in allowed):
        return None
    return f"{field} {image!r} is not an allowed image (chart value images.allowed: {', '.join(allowed) or 'none'})"
