"""The Fast DDS profile every launched process reads (config/fastdds_large_images.xml on Fast DDS 3,
config/fastdds2_large_images.xml on Fast DDS 2: paths.dds_profile_path): it parses on this
distribution's Fast DDS (one bad element and Fast DDS drops the whole file, the large-image
transports with it), and reliable writers repair a lost sample within 20 ms, not the default 3 s
(an e-stop published under load reached the supervisor 3.0 s late with the default)."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from sim2real_ros.paths import config_path, dds_profile_path, fast_dds_major, use_dds_profile

NS = {"dds": "http://www.eprosima.com"}
# A reliable, transient-local publisher as an e-stop button's, created with the profile.
PUBLISH = """
import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile
from std_msgs.msg import Bool
rclpy.init()
node = rclpy.create_node("profile_check")
latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
node.create_publisher(Bool, "estop", latched).publish(Bool(data=True))
node.destroy_node()
rclpy.shutdown()
print("published")
"""


def publish_with(profile) -> subprocess.CompletedProcess:
    """Publish from a process that reads `profile` as use_dds_profile gives it (Fast DDS 2 reads
    FASTRTPS_DEFAULT_PROFILES_FILE only, Fast DDS 3 FASTDDS_DEFAULT_PROFILES_FILE)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_DEFAULT_PROFILES_FILE")}
    use_dds_profile(env)
    (name,) = [k for k in env if k.endswith("_DEFAULT_PROFILES_FILE")]
    env[name] = str(profile)
    return subprocess.run([sys.executable, "-c", PUBLISH], env=env, capture_output=True, text=True, timeout=60)


def test_each_fast_dds_gets_the_profile_in_its_own_element_names():
    assert dds_profile_path({"ROS_DISTRO": "jazzy"}) == config_path("fastdds2_large_images.xml")
    assert dds_profile_path({"ROS_DISTRO": "humble"}) == config_path("fastdds2_large_images.xml")
    assert dds_profile_path({"ROS_DISTRO": "kilted"}) == config_path("fastdds_large_images.xml")
    # Without ROS_DISTRO (these wheels): the installed Fast DDS's own version.
    assert fast_dds_major({}) == (2 if _installed("ros-fastrtps") else 3)
    # Each reads its own variable: Jazzy's Fast DDS 2.14 ignores FASTDDS_DEFAULT_PROFILES_FILE.
    jazzy, kilted = {"ROS_DISTRO": "jazzy"}, {"ROS_DISTRO": "kilted"}
    use_dds_profile(jazzy)
    use_dds_profile(kilted)
    assert jazzy["FASTRTPS_DEFAULT_PROFILES_FILE"].endswith("fastdds2_large_images.xml")
    assert "FASTDDS_DEFAULT_PROFILES_FILE" not in jazzy
    assert kilted["FASTDDS_DEFAULT_PROFILES_FILE"].endswith("/fastdds_large_images.xml")
    assert "FASTRTPS_DEFAULT_PROFILES_FILE" not in kilted


def _installed(package: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(package)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_reliable_writers_repair_a_lost_sample_within_20_ms():
    for name, element in (("fastdds_large_images.xml", "heartbeat_period"),
                          ("fastdds2_large_images.xml", "heartbeatPeriod")):
        root = ET.parse(config_path(name)).getroot()
        writers = root.findall("dds:profiles/dds:data_writer", NS)
        assert [w.get("is_default_profile") for w in writers] == ["true"], name
        period = writers[0].find(f"dds:times/dds:{element}", NS)
        seconds = int(period.find("dds:sec", NS).text) + int(period.find("dds:nanosec", NS).text) * 1e-9
        assert 0 < seconds <= 0.020, name
        # Otherwise the same file: the participant's transports and the writer's times.
        other = config_path("fastdds_large_images.xml").read_text().replace("heartbeat_period>", "heartbeatPeriod>")
        assert _body(config_path(name).read_text().replace("heartbeat_period>", "heartbeatPeriod>")) == _body(other)


def _body(text: str) -> str:
    """The profile without its comments."""
    return ET.tostring(ET.fromstring(text.split("?>", 1)[1]), encoding="unicode")


def test_the_profile_parses_on_this_fast_dds_and_a_broken_one_is_reported(tmp_path):
    shipped = publish_with(dds_profile_path())
    said = shipped.stdout + shipped.stderr  # Fast DDS 2 logs to stdout, 3 to stderr
    assert shipped.returncode == 0 and "published" in shipped.stdout, said
    assert "XMLPARSER" not in said and "Error" not in said, said
    # The same check sees a profile Fast DDS refuses (an element neither version knows).
    broken = tmp_path / "broken.xml"
    text = dds_profile_path().read_text()
    broken.write_text(text.replace("heartbeat_period>", "heartbeat_interval>").replace("heartbeatPeriod>",
                                                                                        "heartbeat_interval>"))
    refused = publish_with(broken)
    assert "XMLPARSER" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
