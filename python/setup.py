"""The wheel carries prebuilt native libraries (scripts/build-wheel.sh copies libmcore_init.so,
and the Gloo plugin where built, into mcore_init/_native/ of a staging copy): it is tagged for
the platform (py3-none-linux_<arch>, which scripts/build-wheel.sh then repairs with auditwheel
into a manylinux tag), not as pure Python, and its files sit in platlib (auditwheel refuses
shared libraries in purelib)."""

from setuptools import setup
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    """Native libraries without setuptools-built extensions: install to platlib."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
