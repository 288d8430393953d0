"""Shared test configuration: the real sshd on localhost (tests/sshd_fixture.py) for the SSH host path."""
pytest_plugins = ["sshd_fixture"]
