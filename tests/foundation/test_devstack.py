import socket

import pytest

from bin import devstack
from bin.embedded import ServerError, Valkey, free_port


def test_starting_on_a_busy_port_fails_naming_the_port(monkeypatch, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setenv("PORT", str(port))
        assert devstack.main([]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is busy" in err and "PORT=" in err


def test_a_second_valkey_on_a_taken_port_is_refused_and_the_first_keeps_running(tmp_path):
    first = Valkey(tmp_path / "a", free_port())
    first.start()
    try:
        with pytest.raises(ServerError, match=f"port {first.port} on 127.0.0.1 is busy"):
            Valkey(tmp_path / "b", first.port).start()
        assert first.process.poll() is None
    finally:
        first.stop()
