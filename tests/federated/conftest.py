"""Fixtures: a real local Flower federation (SuperLink + SuperNodes) for the tests."""

import pytest

try:
    from skfed.federated.flower import LocalFederation, make_certificates, write_app
except ImportError:  # flwr not installed: the Flower tests skip themselves
    LocalFederation = make_certificates = write_app = None


@pytest.fixture(scope="session")
def tls_certificates(tmp_path_factory):
    """PEM files of a test CA and a SuperLink certificate for 127.0.0.1."""
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def local_federation():
    """:class:`skfed.federated.flower.LocalFederation`."""
    return LocalFederation


@pytest.fixture(scope="session")
def flower_app():
    """:func:`skfed.federated.flower.write_app`."""
    return write_app
