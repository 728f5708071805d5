"""Schemathesis against the app's own OpenAPI spec over real HTTP (SQLite, real Redis, a key sent): generated
requests for every operation, a few examples each; no answer is a 500 and every answer fits the spec."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api.main import create_app
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(180)

EXAMPLES = 15  # per operation: enough to reach NUL, surrogates, huge numbers and odd types, within a minute


def test_generated_requests_get_no_500_and_answers_fit_the_spec(
    tmp_path: Path, redis_url: str, serve: type, api_key: type
) -> None:
    import hypothesis
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # An NDJSON job upload's body is bytes, sent as they are (POST /v1/jobs/ndjson).
    schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")
    root = tmp_path / "inbox"
    root.mkdir()
    db_url = f"sqlite:///{tmp_path / 'fuzz.db'}"
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="fuzz-model",
        allowed_input_roots=[root],
        data_dir=tmp_path / "data",
        api_reconcile=False,
    )
    auth = api_key.header(api_key.make(db_url, admin=True))
    failures: dict[str, str] = {}
    with serve(create_app(settings)) as srv:
        spec = httpx.get(f"{srv.url}/openapi.json", headers=auth, timeout=30).json()
        schema = schemathesis.openapi.from_dict(spec)
        for result in schema.get_all_operations():
            operation = result.ok()

            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(hypothesis.HealthCheck),
                phases=[hypothesis.Phase.generate],
            )
            @hypothesis.given(case=operation.as_strategy())
            def run(case: schemathesis.Case) -> None:
                case.call_and_validate(
                    base_url=srv.url,
                    headers=auth,
                    timeout=30,
                    checks=[
                        not_a_server_error,
                        status_code_conformance,
                        content_type_conformance,
                        response_schema_conformance,
                    ],
                )

            try:
                run()
            except Exception as exc:  # one operation's failure must not hide the others'
                failures[operation.label] = str(exc)[:2000]
    assert not failures, "\n\n".join(f"{op}: {text}" for op, text in failures.items())
