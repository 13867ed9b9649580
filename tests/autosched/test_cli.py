"""The command line: user errors are one line and exit code 2, Ctrl-C says what was saved
and how to resume (exit code 130), every command of the README and docs/ parses, a network tunes."""
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import autosched
from autosched import cli, graph, networks
from evolution import SearchParams

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
GMM = "GMM-1x128x128x128"


def bad_arguments(tmp_path):
    return {
        "tune GMM --trials -1": ([GMM, "--trials", "-1"], "--trials must be >= 0, got -1"),
        "tune GMM --trials abc": ([GMM, "--trials", "abc"], "--trials must be an integer, got 'abc'"),
        "tune GMM --batch 0": ([GMM, "--batch", "0"], "--batch must be >= 1, got 0"),
        "tune --network nonet": (["--network", "nonet"], "unknown network 'nonet' (--network); expected one of"),
        "a directory as --log-file": ([GMM, "--log-file", str(tmp_path)], "is a directory"),
        "a log in no folder": ([GMM, "--log-file", str(tmp_path / "no" / "log.json")], "does not exist"),
        "--seed -1": ([GMM, "--seed", "-1"], "--seed must be >= 0, got -1"),
        "--early-stopping 0": ([GMM, "--early-stopping", "0"], "--early-stopping must be >= 1, got 0"),
        "--batch-size 0": (["--network", "resnet50", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        "--minutes 0": ([GMM, "--minutes", "0"], "--minutes must be a number > 0 (finite), got 0"),
        "--minutes inf": ([GMM, "--minutes", "inf"], "--minutes must be a number > 0 (finite), got inf"),
        "--minutes x": ([GMM, "--minutes", "x"], "--minutes must be a number, got 'x'"),
        "--retime-best -1": ([GMM, "--retime-best", "-1"], "--retime-best must be >= 0, got -1"),
        "unknown workload": (["GMM-1x3", "--trials", "1"], "unknown workload 'GMM-1x3'"),
        "abbreviated option": ([GMM, "--tri", "3"], "unrecognized arguments: --tri 3"),
    }


@pytest.mark.parametrize("case", sorted(bad_arguments(pathlib.Path("/tmp"))))
def test_bad_values_are_one_line_and_exit_code_2(case, tmp_path, capsys):
    argv, message = bad_arguments(tmp_path)[case]
    with pytest.raises(SystemExit) as info:
        cli.main(["tune", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("autosched: error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_an_unwritable_log_is_refused_before_tuning(tmp_path, capsys):
    log = tmp_path / "log.json"
    log.write_text("")
    log.chmod(0o444)
    with pytest.raises(SystemExit) as info:
        cli.main(["tune", GMM, "--log-file", str(log)])
    assert info.value.code == 2 and "is not writable" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["tune"], "tune needs a workload (see `autosched list`) or --network NAME"),
    (["tune", GMM, "--network", "resnet50"],
     f"tune takes a workload or --network, not both (got '{GMM}' and --network resnet50)"),
    (["tune", GMM, "--batch-size", "4"], "--batch-size applies only to --network"),
    (["tune", GMM, "--strategy", "round-robin", "--objective", "latency"],
     "--strategy, --objective apply only to --network"),
    (["tune", GMM, "--no-winograd"], "--no-winograd applies only to --network"),
])
def test_bad_combinations_are_one_line_and_exit_code_2(argv, message, capsys):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"autosched: error: {message}\n"


def test_other_commands_check_their_values(capsys):
    for argv, message in ((["build", "nope"], "unknown workload 'nope'"),
                          (["sketches", GMM, "--samples", "-2"], "--samples must be >= 0, got -2"),
                          (["build", GMM, "--seed", "x"], "--seed must be an integer, got 'x'")):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2 and message in capsys.readouterr().err


def test_the_console_shows_no_traceback(tmp_path):
    for argv in (["tune", GMM, "--trials", "-1"], ["tune", GMM, "--log-file", str(tmp_path)]):
        run = subprocess.run([sys.executable, "-m", "autosched", *argv], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=120)
        assert run.returncode == 2
        assert run.stderr.startswith("autosched: error: ") and run.stderr.count("\n") == 1, run.stderr


# Ctrl-C ----------------------------------------------------------------------------------------

def interrupted_tuning(records):
    """An auto_schedule that saves ``records`` records, then sees Ctrl-C."""
    def tune(task, options):
        if options.log_file:
            with open(options.log_file, "a") as f:
                f.writelines('{"r": %d}\n' % i for i in range(records))
        raise KeyboardInterrupt
    return tune


def test_ctrl_c_says_what_was_saved_and_how_to_resume(tmp_path, monkeypatch, capsys):
    log = tmp_path / "my log.json"
    old = '{"v":1,"workload_key":"k","old":%d%s}\n'
    log.write_text(old % (1, "") + old % (2, "") + old % (2, ',"retimed":true'))  # a re-timing is no trial
    monkeypatch.setattr(autosched.tune, "auto_schedule", interrupted_tuning(3))
    rc = cli.main(["tune", GMM, "--trials", "50", "--log-file", str(log), "--seed", "1"])
    assert rc == 130
    err = capsys.readouterr().err
    assert f"interrupted; 3 new trials saved in {log} (5 in all)" in err
    command = err.split("resume with: ")[1].strip()
    words = shlex.split(command)
    assert words[words.index("tune"):] == ["tune", GMM, "--log-file", str(log), "--seed", "1", "--trials", "47"]
    args = cli.make_parser().parse_args(words[words.index("tune"):])  # the command is valid as printed
    assert (args.trials, args.log_file, args.seed) == (47, str(log), 1)


def test_a_full_disk_is_one_line_and_exit_code_1(tmp_path, monkeypatch, capsys):
    def tune(task, options):
        raise OSError(28, "No space left on device", options.log_file)
    monkeypatch.setattr(autosched.tune, "auto_schedule", tune)
    log = str(tmp_path / "log.json")
    assert cli.main(["tune", GMM, "--log-file", log]) == 1
    assert capsys.readouterr().err == f"autosched: error: [Errno 28] No space left on device: '{log}'\n"


def test_ctrl_c_without_a_log_says_nothing_was_saved(monkeypatch, capsys):
    monkeypatch.setattr(autosched.tune, "auto_schedule", interrupted_tuning(0))
    assert cli.main(["tune", GMM, "--trials", "5"]) == 130
    assert "nothing was saved (no --log-file)" in capsys.readouterr().err


def test_ctrl_c_in_a_real_run_exits_130_without_a_traceback(tmp_path):
    """SIGINT to the whole process group (as a terminal sends it) during measurement."""
    log = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "autosched", "tune", GMM, "--trials", "64", "--batch", "2", "--log-file", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and cli.count_trials(str(log)) < 2:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    saved = cli.count_trials(str(log))
    assert re.search(rf"interrupted; {saved} new trials saved in .*run.json \({saved} in all\)", err), err
    assert f"--trials {64 - saved}" in err.split("resume with: ")[1]


# the README and the network command ------------------------------------------------------------

def test_every_command_line_of_the_docs_parses(monkeypatch, tmp_path):
    """The command lines of README.md and docs/*.md."""
    parser = cli.make_parser()
    pages = [README, *sorted((README.parent / "docs").glob("*.md"))]
    commands = [line.split("#")[0].split() for page in pages
                for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
                for line in block.splitlines() if line.startswith("autosched ")]
    assert len(commands) >= 15
    monkeypatch.chdir(tmp_path)  # the model files the examples name exist here
    for word in {w for words in commands for w in words if w.endswith((".onnx", ".aso"))}:
        (tmp_path / word).write_bytes(b"")   # (models and compiled artifacts)
    for words in commands:      # the logs `pretrain` and `run` read, `run`'s inputs
        if words[1] == "pretrain":
            for word in words[2:words.index("-o")]:
                (tmp_path / word).write_text("# a tuning log\n")
        for option, word in zip(words[1:-1], words[2:]):
            if option == "--input":
                np.save(tmp_path / word, np.zeros(1, np.float32))
    for words in commands:
        args = parser.parse_args(words[1:])
        if getattr(args, "network", None):
            assert args.batch_size is not None, f"the network's batch size is --batch-size: {' '.join(words)}"


def small_network(batch: int, seed: int):
    b = graph.GraphBuilder("small", seed=seed)
    x = b.relu(b.conv2d(b.input((batch, 6, 6, 4)), 8, 3, padding=1))
    return b.graph([b.dense(b.reshape(b.global_avg_pool(x), (batch, 8)), 10)])


def test_command_line_tunes_a_network(monkeypatch, capsys, tmp_path):
    """``tune --network`` with the zoo's network replaced by a small one; --batch-size
    reaches the network, --batch the measurement."""
    pools = (autosched.WorkerPool(2, timeout=15, name="cli-builder"),
             autosched.WorkerPool(1, timeout=10, name="cli-runner"))
    real = networks.tune_networks
    seen = {}

    def network(name, batch=1, seed=0):
        seen["batch"] = batch
        return small_network(batch, seed)

    def tune(part, options, **kwargs):
        seen["measure_batch"] = options.measure_batch
        seen["time_budget_s"] = options.time_budget_s
        seen["retime_best"] = options.retime_best
        return real(part, options, search_params=SearchParams(population=32, generations=1, init_min_population=8),
                    cost_model="random", builder=autosched.LocalBuilder(executor=pools[0]),
                    runner=autosched.LocalRunner(min_repeat_ms=2, repeat=3, executor=pools[1]), **kwargs)

    monkeypatch.setattr(graph, "get_network", network)
    monkeypatch.setattr(networks, "tune_networks", tune)
    try:
        rc = cli.main(["tune", "--network", "resnet50", "--trials", "3", "--batch", "1", "--batch-size", "2",
                       "--minutes", "30", "--retime-best", "2", "--log-file", str(tmp_path / "cli.jsonl")])
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
    out = capsys.readouterr().out
    assert rc == 0 and seen == {"batch": 2, "measure_batch": 1, "time_budget_s": 1800.0, "retime_best": 2}
    assert "end-to-end" in out and "verified against numpy: OK" in out and "Estimated latency" in out
    assert cli.count_trials(str(tmp_path / "cli.jsonl")) == 3  # (the re-timings after them are not trials)


def test_help_says_which_batch_is_which(capsys):
    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "programs measured per search round (default 64); not the network's batch size, which is --batch-size" \
        in text
    assert "--batch-size BATCH_SIZE the network's batch size" in text
