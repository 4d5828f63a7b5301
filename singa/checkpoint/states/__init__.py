"""What a checkpoint saves and restores: the states of a layer or model, of its
optimizer, of its device's random generator and the aux states.

``model_saving`` collects and checks them into entries and hands them to
:mod:`singa.checkpoint.fileformat`; ``model_loading`` checks a file's contents
against a model, its optimizer and its generator before applying them, all or
nothing; ``lazy_params`` holds entries for parameters that layers create on their
first call; ``info`` describes a checkpoint without a model; ``protocols`` names
what the functions need of the objects they save."""
