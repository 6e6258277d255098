"""ament_python package: colcon builds it on a robot, pip installs it into a venv here."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "sim2real_ros"
NODES = ["sim_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor", "recorder", "viz_node",
         "feetech_driver", "camera_node", "leader_arm", "sim_camera"]

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml")),
        (f"share/{PACKAGE}/config/parameters", glob("config/parameters/*.yaml")),
        (f"share/{PACKAGE}/urdf", glob("urdf/*.urdf")),
        (f"share/{PACKAGE}/urdf/so101", glob("urdf/so101/*.urdf") + glob("urdf/so101/*.md")
         + ["urdf/so101/LICENSE"]),
        (f"share/{PACKAGE}/urdf/so101/meshes/visual", glob("urdf/so101/meshes/visual/*.stl")),
        (f"share/{PACKAGE}/urdf/so101/meshes/collision", glob("urdf/so101/meshes/collision/*.stl")),
        (f"share/{PACKAGE}/policies", glob("policies/*")),
        (f"share/{PACKAGE}/benchmarks", glob("benchmarks/*.py")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="sim2real_ros developers",
    maintainer_email="sim2real_ros@example.com",
    description="Run a sim-trained robot policy on a real robot safely, and measure the transfer.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [f"{n} = {PACKAGE}.nodes.{n}:main" for n in NODES]
        + [f"sim2real = {PACKAGE}.cli.main:main"],
    },
)
