"""One module per command; ALL lists them in the order `fabricctl --help` shows them."""

from . import (
    dataset_create,
    dataset_destroy,
    dataset_ingest,
    dataset_seal,
    list_versions,
    publish,
    status,
    unpublish,
    verify,
)

ALL = [dataset_create, dataset_ingest, dataset_seal, dataset_destroy, publish, unpublish, list_versions, status,
       verify]
