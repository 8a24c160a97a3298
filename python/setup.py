"""The wheel carries prebuilt native libraries (scripts/build-wheel.sh copies libmcore_init.so,
and the Gloo plugin where built, into mcore_init/_native/ of a staging copy): it is tagged for
the platform (py3-none-linux_<arch>), not as pure Python."""

from setuptools import setup

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"bdist_wheel": PlatformWheel})
