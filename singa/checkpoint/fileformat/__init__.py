"""The checkpoint file format: the bytes on disk and nothing of a model.

The layout of a checkpoint zip (``layout``) and its JSON members (``manifest``), a
whole file read and validated (``file_reading``) or written (``file_writing``), the
bounded reading of zip members (``zip_members``) after the zip's end record is
checked (``end_records``), ``tensor_dict.npz`` streamed from memory
(``npz_writing``), SHA-256 of array data on worker threads (``hashing``) and the
atomic replacement of a file (``atomic``). ``docs/checkpoint-format.md`` describes
the format."""
