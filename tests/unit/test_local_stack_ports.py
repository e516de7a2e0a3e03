"""The local stack's choice of free ports."""

from services.dev.localstack import stack as stack_module
from services.dev.localstack.stack import LocalStack
from shared.config import load_settings


def test_a_component_never_gets_the_api_port_or_a_port_already_chosen(tmp_path, monkeypatch):
    # `free_port` finds a port that nothing listens on at that moment, so the kernel
    # may offer the API's port (chosen first, bound last) or one given out before.
    settings = load_settings(api_port=41000, database_url=None, valkey_url=None)
    offered = iter([41000, 41001, 41000, 41001, 41002])
    monkeypatch.setattr(stack_module, "free_port", lambda: next(offered))
    stack = LocalStack(settings, tmp_path)
    assert [stack._port(None), stack._port(None)] == [41001, 41002]
    assert stack._port(5432) == 5432  # a configured port is taken as it is
