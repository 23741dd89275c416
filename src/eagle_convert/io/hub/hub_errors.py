"""The Hub's failures as typed, one-paragraph errors: the HubError classes, and the mapping from huggingface_hub /
transport exceptions to them (`hub_errors`)."""

from __future__ import annotations

import contextlib

import httpx2  # huggingface_hub's HTTP client: what a dropped connection raises
from huggingface_hub import constants
from huggingface_hub import errors as hf

from ...errors import HubError


class RepoNotFoundError(HubError):
    """No such repo (or a private one the token cannot see)."""


class GatedRepoError(HubError):
    """A gated repo, and no token with access to it."""


class RevisionNotFoundError(HubError):
    """The repo exists but the branch, tag or commit does not."""


class RemoteFileNotFoundError(HubError):
    """The repo has no such file at this commit."""


class HubNetworkError(HubError):
    """The Hub could not be reached, or a transfer kept failing (after retries)."""


class OfflineCacheMissError(HubError):
    """Offline, and what is needed is not in the cache."""


class RemoteSizeMismatchError(HubError):
    """The bytes received do not match what the listing or the safetensors header promised."""


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str, what: str, *, offline: bool):
    """Turn huggingface_hub / transport exceptions into our typed, one-paragraph errors."""
    where = f"{repo_id}@{revision}"
    try:
        yield
    except HubError:
        raise
    except hf.GatedRepoError as exc:  # a subclass of RepositoryNotFoundError: first
        raise GatedRepoError(f"{repo_id} is a gated repo and reading {what} was refused.",
                             f"Request access on {constants.ENDPOINT}/{repo_id}, then pass --token or set HF_TOKEN "
                             "(or run `hf auth login`).") from exc
    except hf.RepositoryNotFoundError as exc:
        raise RepoNotFoundError(f"Repository {repo_id} was not found on {constants.ENDPOINT}.",
                                "Check the spelling (org/name); if it is private, pass --token or set HF_TOKEN."
                                ) from exc
    except hf.RevisionNotFoundError as exc:
        raise RevisionNotFoundError(f"Revision {revision!r} does not exist in {repo_id}.",
                                    "Pass an existing branch, tag or full commit sha with --revision.") from exc
    except hf.RemoteEntryNotFoundError as exc:
        raise RemoteFileNotFoundError(f"{what} is not in {where}.", "Check the repo id and revision.") from exc
    except (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as exc:
        if offline or constants.is_offline_mode():
            raise OfflineCacheMissError(
                f"Offline mode: {what} of {where} is not in the cache ({constants.HF_HUB_CACHE}).",
                "Run once online (without --offline and HF_HUB_OFFLINE=1) to fetch it.") from exc
        raise HubNetworkError(f"Could not reach {constants.ENDPOINT} for {what} of {where}, and it is not cached.",
                              "Check your connection (and HF_ENDPOINT), then run again.") from exc
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status >= 500:
            raise HubNetworkError(f"The Hub answered HTTP {status} for {what} of {where}.",
                                  "The Hub is having trouble: run again later.") from exc
        if status == 401:
            raise HubError(f"The Hub rejected the token sent for {what} of {where} (HTTP 401).",
                           "Pass a valid token with --token or HF_TOKEN, or unset it to read public repos.") from exc
        if status == 416:
            raise RemoteSizeMismatchError(
                f"{what} of {where} is shorter than its listing says (HTTP 416).",
                "The file on the Hub is truncated or changed: report it to the repo owner.") from exc
        raise HubError(f"The Hub answered HTTP {status} for {what} of {where}.",
                       "Run again later; if it persists, check your token and HF_ENDPOINT.") from exc
    except httpx2.TransportError as exc:
        raise HubNetworkError(f"Network error while fetching {what} of {where}: {type(exc).__name__}: {exc}.",
                              "Run again: completed files stay cached, so only what is missing is fetched.") from exc
    except OSError as exc:  # hf_hub_download's size check; anything else (a full disk...) is not a Hub problem
        if "Consistency check failed" not in str(exc):
            raise
        raise RemoteSizeMismatchError(f"{what} of {where} does not have the size the Hub announced.",
                                      "Run again; if it persists the file on the Hub is inconsistent.") from exc

