"""`make install` honours PREFIX and DESTDIR and installs a working relay."""
import os
import subprocess
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_install_into_destdir():
    with tempfile.TemporaryDirectory(prefix="slot-install-") as dest:
        subprocess.run(["make", "-s", "install", "DESTDIR=" + dest, "PREFIX=/opt/slot"],
                       cwd=ROOT, check=True, capture_output=True)
        want = [
            "opt/slot/sbin/slot-relayd",
            "opt/slot/lib/systemd/system/slot-relayd.service",
            "etc/slot/relayd.conf.example",
            "opt/slot/share/doc/slot/relay.md",
            "opt/slot/share/doc/slot/protocol.md",
        ]
        for w in want:
            assert os.path.isfile(os.path.join(dest, w)), w
        binary = os.path.join(dest, "opt/slot/sbin/slot-relayd")
        assert os.access(binary, os.X_OK)
        out = subprocess.run([binary, "-V"], capture_output=True, text=True, check=True)
        assert out.stdout.startswith("slot-relayd ")
        unit = open(os.path.join(dest, "opt/slot/lib/systemd/system/slot-relayd.service")).read()
        assert "ExecStart=/opt/slot/sbin/slot-relayd -c /etc/slot/relayd.conf" in unit
        assert "@" not in unit
        # The example configuration is the defaults, and it checks as valid
        # once a key exists (here: a private copy pointing at a temp key).
        conf = open(os.path.join(dest, "etc/slot/relayd.conf.example")).read()
        key = os.path.join(dest, "key")
        with open(key, "w") as f:
            f.write("ab" * 32 + "\n")
        os.chmod(key, 0o600)
        cpath = os.path.join(dest, "relayd.conf")
        with open(cpath, "w") as f:
            f.write(conf.replace("key_file = /etc/slot/key", "key_file = " + key))
        res = subprocess.run([binary, "-t", "-c", cpath], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "configuration ok" in res.stdout


def test_install_slotd():
    with tempfile.TemporaryDirectory(prefix="slot-install-") as dest:
        subprocess.run(["make", "-s", "install", "DESTDIR=" + dest, "PREFIX=/opt/slot"],
                       cwd=ROOT, check=True, capture_output=True)
        for w in ("opt/slot/sbin/slotd", "opt/slot/lib/systemd/system/slotd.service",
                  "etc/slot/slotd.conf.example", "opt/slot/share/doc/slot/slotd.md"):
            assert os.path.isfile(os.path.join(dest, w)), w
        binary = os.path.join(dest, "opt/slot/sbin/slotd")
        out = subprocess.run([binary, "-V"], capture_output=True, text=True, check=True)
        assert out.stdout.startswith("slotd ")
        unit = open(os.path.join(dest, "opt/slot/lib/systemd/system/slotd.service")).read()
        assert "ExecStart=/opt/slot/sbin/slotd -c /etc/slot/slotd.conf" in unit
        assert "@" not in unit
        conf = open(os.path.join(dest, "etc/slot/slotd.conf.example")).read()
        key = os.path.join(dest, "key")
        with open(key, "w") as f:
            f.write("cd" * 32 + "\n")
        os.chmod(key, 0o600)
        cpath = os.path.join(dest, "slotd.conf")
        with open(cpath, "w") as f:
            f.write(conf.replace("key_file = /etc/slot/key", "key_file = " + key))
        res = subprocess.run([binary, "-t", "-c", cpath], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "configuration ok" in res.stdout
        # A broken file names its line.
        with open(cpath, "a") as f:
            f.write("[select]\nmin_gain = fast\n")
        res = subprocess.run([binary, "-t", "-c", cpath], capture_output=True, text=True)
        assert res.returncode != 0
        assert "slotd.conf:%d:" % (conf.count("\n") + 2) in res.stderr, res.stderr
