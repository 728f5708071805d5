"""The settings in sections (vlbatch.settings): every environment name of the flat class still sets its setting,
flat construction and copies still work, and the product reads every setting by section."""

from __future__ import annotations

import importlib.util
import sys
from ipaddress import IPv4Network
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from vlbatch.settings import FLAT_MEMBERS, FLAT_NAMES, Settings, TenantQuota, env_name_of, env_names, sections

ROOT = Path(__file__).resolve().parents[1]

# Every environment name the flat Settings class answered to before the sections, generated once from it. A
# setting's variable is an interface (deployments, .env files, Helm values): one that disappears or changes fails
# here. A new setting is added to this table.
ENV_NAMES: dict[str, tuple[str, ...]] = {
    "database_url": ("VLBATCH_DATABASE_URL",),
    "broker_url": ("VLBATCH_BROKER_URL",),
    "log_level": ("VLBATCH_LOG_LEVEL",),
    "log_format": ("VLBATCH_LOG_FORMAT",),
    "log_file": ("VLBATCH_LOG_FILE",),
    "model_path": ("VLBATCH_MODEL_PATH",),
    "model_name": ("VLBATCH_MODEL_NAME",),
    "allowed_input_roots": ("VLBATCH_ALLOWED_INPUT_ROOTS",),
    "allowed_s3_prefixes": ("VLBATCH_ALLOWED_S3_PREFIXES",),
    "tenant_roots_required": ("VLBATCH_TENANT_ROOTS_REQUIRED",),
    "model_not_served": ("VLBATCH_MODEL_NOT_SERVED",),
    "chunk_size": ("VLBATCH_CHUNK_SIZE",),
    "document_chunk_size": ("VLBATCH_DOCUMENT_CHUNK_SIZE",),
    "lease_seconds": ("VLBATCH_LEASE_SECONDS",),
    "url_timeout_s": ("VLBATCH_URL_TIMEOUT_S",),
    "url_allow_networks": ("VLBATCH_URL_ALLOW_NETWORKS",),
    "url_allow_hosts": ("VLBATCH_URL_ALLOW_HOSTS",),
    "url_max_redirects": ("VLBATCH_URL_MAX_REDIRECTS",),
    "max_input_bytes": ("VLBATCH_MAX_INPUT_BYTES",),
    "max_video_bytes": ("VLBATCH_MAX_VIDEO_BYTES",),
    "max_video_seconds": ("VLBATCH_MAX_VIDEO_SECONDS",),
    "max_video_pixels": ("VLBATCH_MAX_VIDEO_PIXELS",),
    "video_decode_timeout_s": ("VLBATCH_VIDEO_DECODE_TIMEOUT_S",),
    "engine": ("VLBATCH_ENGINE",),
    "preprocess_threads": ("VLBATCH_PREPROCESS_THREADS",),
    "preprocess_nice": ("VLBATCH_PREPROCESS_NICE",),
    "worker_queues": ("VLBATCH_WORKER_QUEUES",),
    "worker_concurrency": ("VLBATCH_WORKER_CONCURRENCY",),
    "drain_timeout_s": ("VLBATCH_DRAIN_TIMEOUT_S",),
    "engine_sample_interval_s": ("VLBATCH_ENGINE_SAMPLE_INTERVAL_S",),
    "reconcile_interval_s": ("VLBATCH_RECONCILE_INTERVAL_S",),
    "unclaimed_resend_s": ("VLBATCH_UNCLAIMED_RESEND_S",),
    "api_reconcile": ("VLBATCH_API_RECONCILE",),
    "image_decode_isolation": ("VLBATCH_IMAGE_DECODE_ISOLATION",),
    "image_decode_timeout_s": ("VLBATCH_IMAGE_DECODE_TIMEOUT_S",),
    "image_decode_memory_mb": ("VLBATCH_IMAGE_DECODE_MEMORY_MB",),
    "image_decode_processes": ("VLBATCH_IMAGE_DECODE_PROCESSES",),
    "document_parse_timeout_s": ("VLBATCH_DOCUMENT_PARSE_TIMEOUT_S",),
    "document_parse_memory_mb": ("VLBATCH_DOCUMENT_PARSE_MEMORY_MB",),
    "document_parse_processes": ("VLBATCH_DOCUMENT_PARSE_PROCESSES",),
    "max_items_per_job": ("VLBATCH_MAX_ITEMS_PER_JOB",),
    "max_items_per_request": ("VLBATCH_MAX_ITEMS_PER_REQUEST",),
    "max_images_per_item": ("VLBATCH_MAX_IMAGES_PER_ITEM",),
    "max_source_chars": ("VLBATCH_MAX_SOURCE_CHARS",),
    "data_dir": ("VLBATCH_DATA_DIR",),
    "max_request_bytes": ("VLBATCH_MAX_REQUEST_BYTES",),
    "max_upload_bytes": ("VLBATCH_MAX_UPLOAD_BYTES",),
    "max_batch_line_bytes": ("VLBATCH_MAX_BATCH_LINE_BYTES",),
    "max_batch_lines": ("VLBATCH_MAX_BATCH_LINES",),
    "api_url": ("VLBATCH_API_URL",),
    "api_key": ("VLBATCH_API_KEY",),
    "auth": ("VLBATCH_AUTH",),
    "auth_open_docs": ("VLBATCH_AUTH_OPEN_DOCS",),
    "auth_open_metrics": ("VLBATCH_AUTH_OPEN_METRICS",),
    "dashboard_session_hours": ("VLBATCH_DASHBOARD_SESSION_HOURS",),
    "max_manual_tags": ("VLBATCH_MAX_MANUAL_TAGS",),
    "thumbnail_processes": ("VLBATCH_THUMBNAIL_PROCESSES",),
    "thumbnail_wait_s": ("VLBATCH_THUMBNAIL_WAIT_S",),
    "readyz_timeout_s": ("VLBATCH_READYZ_TIMEOUT_S",),
    "tenant_max_items_per_job": ("VLBATCH_TENANT_MAX_ITEMS_PER_JOB",),
    "tenant_max_active_jobs": ("VLBATCH_TENANT_MAX_ACTIVE_JOBS",),
    "tenant_max_upload_bytes": ("VLBATCH_TENANT_MAX_UPLOAD_BYTES",),
    "tenant_quotas": ("VLBATCH_TENANT_QUOTAS",),
    "tenant_shares": ("VLBATCH_TENANT_SHARES",),
    "fair_share_window_s": ("VLBATCH_FAIR_SHARE_WINDOW_S",),
    "dry_run_max_files": ("VLBATCH_DRY_RUN_MAX_FILES",),
    "dry_run_max_seconds": ("VLBATCH_DRY_RUN_MAX_SECONDS",),
    "dry_run_header_bytes": ("VLBATCH_DRY_RUN_HEADER_BYTES",),
    "dry_run_concurrency": ("VLBATCH_DRY_RUN_CONCURRENCY",),
    "http_max_header_bytes": ("VLBATCH_HTTP_MAX_HEADER_BYTES",),
    "http_max_headers": ("VLBATCH_HTTP_MAX_HEADERS",),
    "trusted_proxies": ("VLBATCH_TRUSTED_PROXIES",),
    "tenant_max_upload_total_bytes": ("VLBATCH_TENANT_MAX_UPLOAD_TOTAL_BYTES",),
    "tenant_max_upload_files": ("VLBATCH_TENANT_MAX_UPLOAD_FILES",),
    "cpu_kv_cache_share": ("VLBATCH_CPU_KV_CACHE_SHARE",),
    "visible_devices": ("VLBATCH_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"),
    "instances": ("VLBATCH_INSTANCES",),
    "npu_smi": ("VLBATCH_NPU_SMI",),
    "platform": ("VLBATCH_PLATFORM",),
    "mm_merge": ("VLBATCH_MM_MERGE",),
    "hccl_if_ip": ("VLBATCH_HCCL_IF_IP", "HCCL_IF_IP"),
    "hccl_socket_ifname": ("VLBATCH_HCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME"),
    "gloo_socket_ifname": ("VLBATCH_GLOO_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"),
    "tp_socket_ifname": ("VLBATCH_TP_SOCKET_IFNAME", "TP_SOCKET_IFNAME"),
    "ascend_toolkit_home": ("VLBATCH_ASCEND_TOOLKIT_HOME", "ASCEND_TOOLKIT_HOME"),
    "celery_node": ("VLBATCH_CELERY_NODE",),
    "heartbeat_file": ("VLBATCH_HEARTBEAT_FILE",),
    "engine_load_ledger": ("VLBATCH_ENGINE_LOAD_LEDGER",),
    "engine_stall_s": ("VLBATCH_ENGINE_STALL_S",),
    "telemetry_interval_s": ("VLBATCH_TELEMETRY_INTERVAL_S",),
    "breaker_crashes": ("VLBATCH_BREAKER_CRASHES",),
    "engine_loads_per_hour": ("VLBATCH_ENGINE_LOADS_PER_HOUR",),
    "breaker_backoff_s": ("VLBATCH_BREAKER_BACKOFF_S",),
    "breaker_backoff_max_s": ("VLBATCH_BREAKER_BACKOFF_MAX_S",),
    "canary_timeout_s": ("VLBATCH_CANARY_TIMEOUT_S",),
    "energy_interval_s": ("VLBATCH_ENERGY_INTERVAL_S",),
    "price_per_kwh": ("VLBATCH_PRICE_PER_KWH",),
    "thermal_limit_c": ("VLBATCH_THERMAL_LIMIT_C",),
    "thermal_resume_c": ("VLBATCH_THERMAL_RESUME_C",),
    "thermal_max_wait_s": ("VLBATCH_THERMAL_MAX_WAIT_S",),
    "xmp_keyword_root": ("VLBATCH_XMP_KEYWORD_ROOT",),
    # added after the sections: large jobs, retention and the janitor, webhooks
    "max_item_line_bytes": ("VLBATCH_MAX_ITEM_LINE_BYTES",),
    "retention_jobs_s": ("VLBATCH_RETENTION_JOBS_S",),
    "retention_files_s": ("VLBATCH_RETENTION_FILES_S",),
    "retention_engine_samples_s": ("VLBATCH_RETENTION_ENGINE_SAMPLES_S",),
    "retention_webhook_deliveries_s": ("VLBATCH_RETENTION_WEBHOOK_DELIVERIES_S",),
    "janitor_interval_s": ("VLBATCH_JANITOR_INTERVAL_S",),
    "janitor_batch_rows": ("VLBATCH_JANITOR_BATCH_ROWS",),
    "webhook_allow_loopback": ("VLBATCH_WEBHOOK_ALLOW_LOOPBACK",),
    "webhook_timeout_s": ("VLBATCH_WEBHOOK_TIMEOUT_S",),
    "webhook_max_answer_bytes": ("VLBATCH_WEBHOOK_MAX_ANSWER_BYTES",),
    "webhook_retry_base_s": ("VLBATCH_WEBHOOK_RETRY_BASE_S",),
    "webhook_retry_for_s": ("VLBATCH_WEBHOOK_RETRY_FOR_S",),
    "webhook_disable_after_s": ("VLBATCH_WEBHOOK_DISABLE_AFTER_S",),
    "webhook_poll_s": ("VLBATCH_WEBHOOK_POLL_S",),
    "webhook_sender": ("VLBATCH_WEBHOOK_SENDER",),
}

# For each setting, an environment value other than its default, and what the section then holds.
VALUES: dict[str, tuple[str, object]] = {
    "database_url": ("database_url-set", "database_url-set"),
    "broker_url": ("broker_url-set", "broker_url-set"),
    "celery_node": ("celery_node-set", "celery_node-set"),
    "log_level": ("DEBUG", "DEBUG"),
    "log_format": ("json", "json"),
    "log_file": ("/tmp/log_file", Path("/tmp/log_file")),
    "api_url": ("api_url-set", "api_url-set"),
    "auth": ("off", "off"),
    "auth_open_docs": ("true", True),
    "auth_open_metrics": ("true", True),
    "max_request_bytes": ("16777217", 16777217),
    "http_max_header_bytes": ("32769", 32769),
    "http_max_headers": ("101", 101),
    "readyz_timeout_s": ("1.0", 1.0),
    "dashboard_session_hours": ("4.0", 4.0),
    "max_manual_tags": ("65", 65),
    "thumbnail_processes": ("3", 3),
    "thumbnail_wait_s": ("15.0", 15.0),
    "tenant_max_items_per_job": ("2", 2),
    "tenant_max_active_jobs": ("101", 101),
    "tenant_max_upload_bytes": ("2", 2),
    "tenant_max_upload_total_bytes": ("21474836481", 21474836481),
    "tenant_max_upload_files": ("1001", 1001),
    "dry_run_max_files": ("1001", 1001),
    "dry_run_max_seconds": ("2.5", 2.5),
    "dry_run_header_bytes": ("1048577", 1048577),
    "dry_run_concurrency": ("3", 3),
    "tenant_roots_required": ("true", True),
    "url_timeout_s": ("5.0", 5.0),
    "url_max_redirects": ("6", 6),
    "max_items_per_job": ("5000001", 5000001),
    "max_items_per_request": ("100001", 100001),
    "max_images_per_item": ("257", 257),
    "max_source_chars": ("4097", 4097),
    "max_input_bytes": ("52428801", 52428801),
    "max_video_bytes": ("2147483649", 2147483649),
    "max_video_seconds": ("5400.0", 5400.0),
    "max_video_pixels": ("35389441", 35389441),
    "data_dir": ("/tmp/data_dir", Path("/tmp/data_dir")),
    "max_upload_bytes": ("209715201", 209715201),
    "max_batch_line_bytes": ("1048577", 1048577),
    "max_batch_lines": ("50001", 50001),
    "preprocess_threads": ("5", 5),
    "preprocess_nice": ("11", 11),
    "image_decode_isolation": ("process", "process"),
    "image_decode_timeout_s": ("15.0", 15.0),
    "image_decode_memory_mb": ("1025", 1025),
    "image_decode_processes": ("3", 3),
    "video_decode_timeout_s": ("60.0", 60.0),
    "document_parse_timeout_s": ("60.0", 60.0),
    "document_parse_memory_mb": ("2049", 2049),
    "document_parse_processes": ("3", 3),
    "xmp_keyword_root": ("xmp_keyword_root-set", "xmp_keyword_root-set"),
    "chunk_size": ("33", 33),
    "document_chunk_size": ("3", 3),
    "lease_seconds": ("121", 121),
    "reconcile_interval_s": ("15.0", 15.0),
    "unclaimed_resend_s": ("30.0", 30.0),
    "api_reconcile": ("false", False),
    "fair_share_window_s": ("300.0", 300.0),
    "model_path": ("model_path-set", "model_path-set"),
    "model_name": ("model_name-set", "model_name-set"),
    "model_not_served": ("refuse", "refuse"),
    "worker_concurrency": ("3", 3),
    "drain_timeout_s": ("30.0", 30.0),
    "engine_sample_interval_s": ("5.0", 5.0),
    "heartbeat_file": ("/tmp/heartbeat_file", Path("/tmp/heartbeat_file")),
    "cpu_kv_cache_share": ("0.125", 0.125),
    "engine_load_ledger": ("/tmp/engine_load_ledger", Path("/tmp/engine_load_ledger")),
    "engine_stall_s": ("150.0", 150.0),
    "canary_timeout_s": ("60.0", 60.0),
    "breaker_crashes": ("4", 4),
    "engine_loads_per_hour": ("21", 21),
    "breaker_backoff_s": ("15.0", 15.0),
    "breaker_backoff_max_s": ("450.0", 450.0),
    "npu_smi": ("npu_smi-set", "npu_smi-set"),
    "platform": ("platform-set", "platform-set"),
    "mm_merge": ("index", "index"),
    "hccl_if_ip": ("hccl_if_ip-set", "hccl_if_ip-set"),
    "hccl_socket_ifname": ("hccl_socket_ifname-set", "hccl_socket_ifname-set"),
    "gloo_socket_ifname": ("gloo_socket_ifname-set", "gloo_socket_ifname-set"),
    "tp_socket_ifname": ("tp_socket_ifname-set", "tp_socket_ifname-set"),
    "ascend_toolkit_home": ("/tmp/ascend_toolkit_home", Path("/tmp/ascend_toolkit_home")),
    "telemetry_interval_s": ("5.0", 5.0),
    "energy_interval_s": ("5.0", 5.0),
    "price_per_kwh": ("0.5", 0.5),
    "thermal_limit_c": ("47.5", 47.5),
    "thermal_resume_c": ("44.0", 44.0),
    "thermal_max_wait_s": ("300.0", 300.0),
    "api_key": ("sk-set", "sk-set"),
    "trusted_proxies": ("10.0.0.0/8, 192.168.1.1", ["10.0.0.0/8", "192.168.1.1"]),
    "tenant_quotas": ('{"acme": {"max_active_jobs": 3}}', {"acme": TenantQuota(max_active_jobs=3)}),
    "allowed_input_roots": ("/data/a,/data/b", [Path("/data/a"), Path("/data/b")]),
    "allowed_s3_prefixes": ("s3://bucket/x,s3://other", ["s3://bucket/x", "s3://other"]),
    "url_allow_networks": ("10.20.0.0/16", [IPv4Network("10.20.0.0/16")]),
    "url_allow_hosts": ("a.example, b.example", ["a.example", "b.example"]),
    "tenant_shares": ('{"acme": 2}', {"acme": 2.0}),
    "worker_queues": ("documents", ["documents"]),
    "engine": ('{"dtype": "float16"}', {"dtype": "float16"}),
    "visible_devices": ("0,1,4", [0, 1, 4]),
    "instances": ('{"a": [0, 1]}', {"a": [0, 1]}),
    "max_item_line_bytes": ("2048", 2048),
    "retention_jobs_s": ("86400", 86400),
    "retention_files_s": ("3600", 3600),
    "retention_engine_samples_s": ("60", 60),
    "retention_webhook_deliveries_s": ("120", 120),
    "janitor_interval_s": ("5.5", 5.5),
    "janitor_batch_rows": ("10", 10),
    "webhook_allow_loopback": ("true", True),
    "webhook_timeout_s": ("3.5", 3.5),
    "webhook_max_answer_bytes": ("100", 100),
    "webhook_retry_base_s": ("1.5", 1.5),
    "webhook_retry_for_s": ("60", 60.0),
    "webhook_disable_after_s": ("90", 90.0),
    "webhook_poll_s": ("0.5", 0.5),
    "webhook_sender": ("false", False),
}


def _codemod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_sections", ROOT / "scripts" / "settings_sections.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _read(settings: Settings, name: str) -> object:
    section, field = FLAT_NAMES[name]
    return getattr(getattr(settings, section), field)


def test_every_environment_name_of_the_flat_class_is_kept() -> None:
    assert {name: env_names(name) for name in FLAT_NAMES} == ENV_NAMES


def test_each_variable_lands_in_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(VALUES) == set(FLAT_NAMES)
    defaults = Settings(_env_file=None)
    for name, (raw, _) in VALUES.items():
        monkeypatch.setenv(env_names(name)[0], raw)
    settings = Settings(_env_file=None)
    for name, (_, expected) in VALUES.items():
        got = _read(settings, name)
        if name == "api_key":
            got = got.get_secret_value()  # type: ignore[attr-defined]
        assert got == expected, name
        assert got != _read(defaults, name), f"{name}: the test value is its default"


@pytest.mark.parametrize("name", [n for n, names in ENV_NAMES.items() if len(names) > 1])
def test_each_vendor_alias_sets_its_setting(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    raw, expected = VALUES[name]
    for alias in ENV_NAMES[name]:
        with monkeypatch.context() as env:
            env.setenv(alias, raw)
            assert _read(Settings(_env_file=None), name) == expected, alias


def test_dotenv_is_read_flat(tmp_path: Path) -> None:
    dotenv = tmp_path / "vlbatch.env"
    dotenv.write_text("VLBATCH_CHUNK_SIZE=5\nVLBATCH_THERMAL_LIMIT_C=90\nVLBATCH_NOT_A_SETTING=1\n")
    settings = Settings(_env_file=dotenv)
    assert (settings.scheduling.chunk_size, settings.thermal.thermal_limit_c) == (5, 90.0)


def test_flat_construction_files_names_into_sections_and_keyword_beats_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLBATCH_CHUNK_SIZE", "5")
    monkeypatch.setenv("VLBATCH_BROKER_URL", "redis://env/1")
    settings = Settings(_env_file=None, chunk_size=7, database_url="sqlite:///x.db")
    assert settings.scheduling.chunk_size == 7
    assert settings.database.database_url == "sqlite:///x.db"
    assert settings.broker.broker_url == "redis://env/1"
    assert "database_url" in settings.database.model_fields_set
    assert "database_url" not in Settings(_env_file=None).database.model_fields_set


def test_a_name_that_is_no_setting_is_refused_and_constraints_still_hold() -> None:
    with pytest.raises(ValidationError, match="chunk_sise"):
        Settings(_env_file=None, chunk_sise=4)
    with pytest.raises(ValidationError, match="chunk_size"):
        Settings(_env_file=None, chunk_size=0)
    with pytest.raises(ValidationError, match="hysteresis"):
        Settings(_env_file=None, thermal_resume_c=96)


def test_model_copy_takes_flat_names_and_leaves_the_original() -> None:
    settings = Settings(_env_file=None)
    copy = settings.model_copy(update={"chunk_size": 9, "engine": {"dtype": "float16"}, "lease_seconds": 30})
    assert (copy.scheduling.chunk_size, copy.scheduling.lease_seconds) == (9, 30)
    assert copy.runtime.engine == {"dtype": "float16"}
    assert (settings.scheduling.chunk_size, settings.runtime.engine) == (32, {})
    assert copy.scheduling is not settings.scheduling
    assert copy.database is settings.database  # untouched sections are shared, as pydantic's shallow copy does


def test_a_flat_read_names_the_section() -> None:
    # Typed Any so that neither the codemod nor mypy sees a settings object here: these reads are the point.
    flat: Any = Settings(_env_file=None)
    with pytest.raises(AttributeError, match=r"settings\.scheduling\.chunk_size"):
        _ = flat.chunk_size
    with pytest.raises(AttributeError, match=r"settings\.model\.served_model_name"):
        _ = flat.served_model_name
    with pytest.raises(AttributeError, match="no attribute"):
        _ = flat.no_such_thing


def test_flat_names_cover_every_section_field_once() -> None:
    fields = [(section, field) for section, model in sections() for field in model.model_fields]
    assert sorted(FLAT_NAMES.values()) == sorted(fields)
    assert FLAT_MEMBERS == {"quota": "quotas", "served_model_name": "model"}
    assert not set(FLAT_NAMES) & {section for section, _ in sections()}


def test_the_product_reads_no_setting_flat() -> None:
    codemod = _codemod()
    reads = codemod.scan([ROOT / p for p in codemod.PRODUCT], write=False)
    assert not reads, "run python scripts/settings_sections.py:\n" + "\n".join(map(str, reads))


def test_the_codemod_rewrites_every_receiver_and_is_idempotent() -> None:
    codemod = _codemod()
    source = (
        "def f(s: Settings, ctx, n) -> Settings:\n"
        "    a = s.chunk_size + ctx.settings.lease_seconds  # keep this comment\n"
        "    b = get_settings().database_url\n"
        "    run = settings.model_copy(update={'chunk_size': 1})\n"
        "    c = run.chunk_size, self.app.state.settings.quota('t')\n"
        "    e = Settings(x=1).model.served_model_name\n"
        "    d = make_it(n).engine, opts.chunk_size, settings.scheduling.chunk_size\n"
        "    return (\n"
        "        settings\n"
        "    ).thermal_limit_c\n"
        "def make_it(n) -> Settings: ...\n"
    )
    makers = frozenset({"make_it"})
    new, changed = codemod.rewrite(source, makers)
    assert new == (
        "def f(s: Settings, ctx, n) -> Settings:\n"
        "    a = s.scheduling.chunk_size + ctx.settings.scheduling.lease_seconds  # keep this comment\n"
        "    b = get_settings().database.database_url\n"
        "    run = settings.model_copy(update={'chunk_size': 1})\n"
        "    c = run.scheduling.chunk_size, self.app.state.settings.quotas.quota('t')\n"
        "    e = Settings(x=1).model.served_model_name\n"
        "    d = make_it(n).runtime.engine, opts.chunk_size, settings.scheduling.chunk_size\n"
        "    return (\n"
        "        settings\n"
        "    ).thermal.thermal_limit_c\n"
        "def make_it(n) -> Settings: ...\n"
    )
    assert len(changed) == 7
    assert codemod.rewrite(new, makers) == (new, [])


def test_the_codemod_check_exits_1_on_a_flat_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    codemod = _codemod()
    (tmp_path / "reader.py").write_text("def f(settings):\n    return settings.chunk_size\n")
    assert codemod.main(["--check", str(tmp_path)]) == 1
    assert "settings.scheduling.chunk_size" in capsys.readouterr().out
    assert codemod.main([str(tmp_path)]) == 0
    assert (tmp_path / "reader.py").read_text() == "def f(settings):\n    return settings.scheduling.chunk_size\n"
    assert codemod.main(["--check", str(tmp_path)]) == 0


def test_an_error_names_the_variable_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLBATCH_LOG_FORMAT", "yaml")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "zero")
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, thermal_resume_c=99)
    named = sorted(env_name_of(e["loc"]) for e in caught.value.errors())
    assert named == [
        "VLBATCH_LOG_FORMAT",
        "VLBATCH_THERMAL_LIMIT_C, VLBATCH_THERMAL_RESUME_C, VLBATCH_THERMAL_MAX_WAIT_S",
        "VLBATCH_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES",
    ]
    assert env_name_of(("quotas", "tenant_quotas", "acme", "max_active_jobs")) == (
        "VLBATCH_TENANT_QUOTAS__ACME__MAX_ACTIVE_JOBS"
    )
