// What the fuzz targets that reach model/keras_weights.h's HDF5 reader
// need around it. libhdf5 reads in a forked child process there, so:
//   - the child's inline 8-bit coverage counters are its own copy of this
//     process's, lost when it exits. Before it exits it copies them into
//     memory shared with this process (SetWeightsReaderHooks), and
//     MergeForkedCoverage() puts them back into this process's counters,
//     so that libFuzzer is guided by what the child ran;
//   - under ASan, a report whose first frame past the sanitizer's is in
//     libhdf5 (uninstrumented, but its memcpy is intercepted: a length
//     taken from a corrupt heap) ends the child by SIGSEGV, unprinted, as
//     the same memcpy does without ASan: the reader names that as libhdf5
//     crashing. Any other report (our code) is printed as the child dies,
//     which the reader answers as an internal error and the targets abort
//     on.
#ifndef PSCLUSTER_FUZZ_FORKED_READER_H_
#define PSCLUSTER_FUZZ_FORKED_READER_H_

namespace pscluster {

// Once, from LLVMFuzzerInitialize.
void SetUpForkedReader();

// Around each input: clears the shared copy (a child that crashed before
// its hook leaves nothing stale) / merges it into this process's counters.
void ClearForkedCoverage();
void MergeForkedCoverage();

}  // namespace pscluster

#endif  // PSCLUSTER_FUZZ_FORKED_READER_H_
