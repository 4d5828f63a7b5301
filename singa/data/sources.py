"""Where the datasets come from: mirrors, file names and published checksums.

SHA-256 of the files as served by the mirrors (checked on download): for MNIST the
values torchvision and tensorflow-datasets pin, for Fashion-MNIST those of
tensorflow-datasets, for CIFAR-10 binary the widely pinned value of the Toronto
archive (the authors publish only its MD5, c32a1d4ab5d03f1284b67883e8d87530, also
recorded). MD5s: torchvision / the Zalando README / the CIFAR page. ``raw_sha256``:
SHA-256 of the decompressed IDX files, listed by several independent projects; the
Fashion-MNIST ones are also reproduced from the Debian package, whose .gz files are
re-compressed (different bytes, same content).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "RemoteFile",
    "Remote",
    "REMOTES",
    "MNIST",
    "FASHION_MNIST",
    "CIFAR10",
    "CIFAR10_ARCHIVE",
    "EMBEDDED_SHA256",
    "EMBEDDED_RAW_MD5",
    "FASHION_MNIST_CLASSES",
    "CIFAR10_CLASSES",
]


@dataclass(frozen=True)
class RemoteFile:
    """One distributed file and its published checksums.

    Attributes:
        name: the file name as distributed (e.g. ``train-images-idx3-ubyte.gz``).
        sha256: SHA-256 of the file as served by the mirror (checked on download).
        md5: the MD5 the dataset's authors (or torchvision) publish for the same file.
        raw_sha256: SHA-256 of the decompressed content, for files that are found
            re-compressed (Debian) or already decompressed; None when not applicable.
        alternatives: other names accepted on disk (the uncompressed IDX file, the
            extracted CIFAR folder).
    """

    name: str
    sha256: str
    md5: str
    raw_sha256: str | None = None
    alternatives: tuple[str, ...] = ()


def _idx(name: str, sha256: str, md5: str, raw_sha256: str) -> RemoteFile:
    return RemoteFile(name, sha256, md5, raw_sha256, alternatives=(name[: -len(".gz")],))


@dataclass(frozen=True)
class Remote:
    """A downloadable dataset: mirrors (base URLs tried in order), files per split, homepage."""

    mirrors: tuple[str, ...]
    files: dict[str, tuple[RemoteFile, ...]]  # split -> files
    homepage: str


MNIST = Remote(
    mirrors=(
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
    files={
        "train": (
            _idx(
                "train-images-idx3-ubyte.gz",
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
            ),
            _idx(
                "train-labels-idx1-ubyte.gz",
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                "d53e105ee54ea40749a09fcbcd1e9432",
                "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
            ),
        ),
        "test": (
            _idx(
                "t10k-images-idx3-ubyte.gz",
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                "9fb629c4189551a2d022fa330f9573f3",
                "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
            ),
            _idx(
                "t10k-labels-idx1-ubyte.gz",
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                "ec29112dd5afa0611ce80d1b7f02629c",
                "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
            ),
        ),
    },
    homepage="http://yann.lecun.com/exdb/mnist/",
)

FASHION_MNIST = Remote(
    mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    files={
        "train": (
            _idx(
                "train-images-idx3-ubyte.gz",
                "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            ),
            _idx(
                "train-labels-idx1-ubyte.gz",
                "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                "25c81989df183df01b3e8a0aad5dffbe",
                "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            ),
        ),
        "test": (
            _idx(
                "t10k-images-idx3-ubyte.gz",
                "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                "bef4ecab320f06d8554ea6380940ec79",
                "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            ),
            _idx(
                "t10k-labels-idx1-ubyte.gz",
                "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
                "bb300cfdad3c16e7a12a480ee83cd310",
                "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            ),
        ),
    },
    homepage="https://github.com/zalandoresearch/fashion-mnist",
)

CIFAR10_ARCHIVE = RemoteFile(
    "cifar-10-binary.tar.gz",
    "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
    "c32a1d4ab5d03f1284b67883e8d87530",
    alternatives=("cifar-10-batches-bin",),
)
CIFAR10 = Remote(
    mirrors=("https://www.cs.toronto.edu/~kriz/",),
    files={"train": (CIFAR10_ARCHIVE,), "test": (CIFAR10_ARCHIVE,)},
    homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
)

#: Downloadable datasets (tests may patch entries, e.g. to point the mirrors at a local server).
REMOTES: dict[str, Remote] = {"mnist": MNIST, "fashion-mnist": FASHION_MNIST, "cifar10": CIFAR10}

#: The embedded files: SHA-256 of the .gz bytes shipped (Debian's re-compression of the
#: upstream files); their decompressed contents are checked against the published
#: ``raw_sha256`` of Fashion-MNIST's test split on every load.
EMBEDDED_SHA256 = {
    "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}
#: Published MD5s of the decompressed Fashion-MNIST test files (as listed by torchvision forks).
EMBEDDED_RAW_MD5 = {
    "t10k-images-idx3-ubyte.gz": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte.gz": "15d484375f8d13e6eb1aabb0c3f46965",
}

FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
