/*
 * ntprofile.h -- the Windows NT profiling API on Linux (perf_event), for C and C++.
 *
 * Link with -lntprofile. A program written for Windows calls these functions exactly as it does there:
 * same names, same argument order, same Windows type widths (on LP64 Linux a ULONG is 32 bits, not a C long),
 * same NTSTATUS values. The exports use the ordinary SysV C calling convention, so NTAPI is empty.
 *
 * Exported calls: NtCreateProfile, NtCreateProfileEx, NtOpenProcess, NtStartProfile, NtStopProfile,
 * NtSetIntervalProfile, NtQueryIntervalProfile, NtClose, each with its Zw alias; and the extensions
 * NtprofileQueryStatistics, NtprofileQueryEventUsage, NtprofileQuerySources, NtprofileRegisterSource,
 * NtprofileSetSourceJitter, NtprofileStatusMessage, the status conversions RtlNtStatusToDosError,
 * RtlNtStatusToDosErrorNoTeb and RtlGetLastNtStatus, and the sampler: NtprofileCreateSampler,
 * NtprofileEnableSampler, NtprofileReadSampler, NtprofileQuerySamplerStatistics.
 *
 * Documentation in the source tree: docs/api.md is the contract (every call, its checks in order and their
 * statuses, the bucket rule, intervals, sources, the extensions); docs/linux-mapping.md says how each call maps
 * onto perf_event and why the divergences below exist.
 *
 * Deliberate divergences from Windows (Linux forces them; see docs/linux-mapping.md, "Deliberate divergences"):
 *
 *  1. Global profiles (Process == NULL) always need the system-profile privilege, whatever ProfileBase is. On
 *     Linux that privilege is CAP_PERFMON, CAP_SYS_ADMIN or kernel.perf_event_paranoid <= 0; without it the
 *     call fails with STATUS_PRIVILEGE_NOT_HELD.
 *  2. A range reaching kernel addresses needs CAP_PERFMON, CAP_SYS_ADMIN or perf_event_paranoid <= 1, else
 *     STATUS_PRIVILEGE_NOT_HELD. A user-address range never sees samples taken in the kernel (the counts are
 *     the same as on Windows, where such samples fall outside the range).
 *  3. NtSetIntervalProfile needs no privilege: the interval table belongs to the calling process, not to the
 *     machine.
 *  4. ProfileTime's limits are Linux's: the cpu-clock event cannot fire faster than every 10 us, and the kernel
 *     throttles above kernel.perf_event_max_sample_rate; the minimum interval follows from both, read at run
 *     time. NtQueryIntervalProfile always reports the effective (clamped) value.
 *  5. Counts land asynchronously, a little after the sample. NtStopProfile disables the events, drains every
 *     ring and only then returns: once it has returned, every sample taken before the stop is counted and
 *     nothing more is written to the buffer.
 *  6. The buffer-size check is exact: ceil(ProfileSize / 2^BucketSize) counters must fit in BufferSize / 4.
 *     Windows computes the count in 32 bits and lets some huge ranges through with a small buffer; here they
 *     get STATUS_BUFFER_TOO_SMALL.
 *  7. The buffer cannot be locked against free(): a C caller MUST keep the Buffer memory allocated, mapped and
 *     writable until NtStopProfile or NtClose of the profile has returned (no free(), munmap() or leaving the
 *     scope of a local array before that). The library's consumer thread writes the counters asynchronously;
 *     freeing the buffer earlier lets it write into freed memory.
 *
 * Process handles: NtCurrentProcess() names the caller; NtOpenProcess opens another process by Linux pid. NULL
 * means every process (see 1 above).
 *
 * Handle values (profiles, processes, samplers) fit in 32 bits, as on 64-bit Windows: each is a positive
 * multiple of 4 below 2^31 (0x00400000..0x7FFFFFFC), so a handle kept in an int or a LONG and sign- or
 * zero-extended back names the same object, and its low two bits are free for tags (clear them before passing
 * the handle back). Only the low 32 bits of a HANDLE argument are significant: they are read as a LONG and
 * sign-extended, whatever the upper half holds (so (HANDLE)(ULONG)-1 is NtCurrentProcess() too, and a value
 * whose low half is 0 is NULL). At most 1,048,576 handles are open at once (the next creation gets
 * STATUS_INSUFFICIENT_RESOURCES). A closed handle stays invalid (STATUS_INVALID_HANDLE): its value comes back
 * only after its slot has been reused 511 times, and a slot is reused only once 4096 other handles were closed
 * after it (unless all 1,048,576 are open). See docs/api.md, "Handle values".
 *
 * Sources: the KPROFILE_SOURCE values of Windows keep their numbers; a source is supported when its perf event
 * opens on this machine (without a hardware PMU only ProfileTime, ProfileAlignmentFixup and the Linux software
 * sources above 0xFFFF are). Unsupported sources fail creation with STATUS_NOT_SUPPORTED and query as 0.
 */
#ifndef NTPROFILE_H
#define NTPROFILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------------------
 * Calling-convention and linkage markers (empty: the exports use the platform's C ABI).
 */
#ifndef NTAPI
#define NTAPI
#endif
#ifndef NTSYSCALLAPI
#define NTSYSCALLAPI
#endif
#ifndef NTSYSAPI
#define NTSYSAPI
#endif

/* ------------------------------------------------------------------------------------------------------------
 * Windows base types, with Windows widths.
 */
typedef void *PVOID;
typedef unsigned char UCHAR, *PUCHAR;
typedef UCHAR BOOLEAN, *PBOOLEAN;
typedef uint16_t USHORT, *PUSHORT;
typedef uint16_t WCHAR, *PWCH, *PWSTR;
typedef int32_t LONG, *PLONG;
typedef uint32_t ULONG, *PULONG;
typedef int64_t LONGLONG, *PLONGLONG;
typedef uint64_t ULONGLONG, *PULONGLONG;
typedef intptr_t LONG_PTR, *PLONG_PTR;
typedef uintptr_t ULONG_PTR, *PULONG_PTR;
typedef size_t SIZE_T, *PSIZE_T;
typedef ULONG_PTR KAFFINITY, *PKAFFINITY;
typedef PVOID HANDLE, *PHANDLE;
typedef LONG NTSTATUS, *PNTSTATUS;
typedef ULONG ACCESS_MASK, *PACCESS_MASK;
typedef char CHAR, *PCHAR, *PSTR;
typedef const char *PCSTR;
typedef int16_t SHORT, *PSHORT;
typedef int64_t LONG64, *PLONG64;
typedef uint64_t ULONG64, *PULONG64;
#ifndef VOID
#define VOID void
#endif

#ifndef TRUE
#define TRUE 1
#endif
#ifndef FALSE
#define FALSE 0
#endif

/* ------------------------------------------------------------------------------------------------------------
 * Status values and helpers.
 */
#define NT_SUCCESS(Status) (((NTSTATUS)(Status)) >= 0)

#define STATUS_SUCCESS                 ((NTSTATUS)0x00000000L)
#define STATUS_DATATYPE_MISALIGNMENT   ((NTSTATUS)0x80000002L)
#define STATUS_BUFFER_OVERFLOW         ((NTSTATUS)0x80000005L)
#define STATUS_ACCESS_VIOLATION        ((NTSTATUS)0xC0000005L)
#define STATUS_INVALID_HANDLE          ((NTSTATUS)0xC0000008L)
#define STATUS_INVALID_CID             ((NTSTATUS)0xC000000BL)
#define STATUS_INVALID_PARAMETER       ((NTSTATUS)0xC000000DL)
#define STATUS_ACCESS_DENIED           ((NTSTATUS)0xC0000022L)
#define STATUS_BUFFER_TOO_SMALL        ((NTSTATUS)0xC0000023L)
#define STATUS_OBJECT_TYPE_MISMATCH    ((NTSTATUS)0xC0000024L)
#define STATUS_PRIVILEGE_NOT_HELD      ((NTSTATUS)0xC0000061L)
#define STATUS_INSUFFICIENT_RESOURCES  ((NTSTATUS)0xC000009AL)
#define STATUS_PROFILING_NOT_STARTED   ((NTSTATUS)0xC00000B7L)
#define STATUS_PROFILING_NOT_STOPPED   ((NTSTATUS)0xC00000B8L)
#define STATUS_NOT_SUPPORTED           ((NTSTATUS)0xC00000BBL)
#define STATUS_PROFILING_AT_LIMIT      ((NTSTATUS)0xC00000D3L)
#define STATUS_INTERNAL_ERROR          ((NTSTATUS)0xC00000E5L)
#define STATUS_INVALID_PARAMETER_7     ((NTSTATUS)0xC00000F5L)

/* The pseudo-handles of the calling process and thread (closing one is a no-op that succeeds). */
#define NtCurrentProcess() ((HANDLE)(LONG_PTR)-1)
#define ZwCurrentProcess() NtCurrentProcess()
#define NtCurrentThread() ((HANDLE)(LONG_PTR)-2)
#define ZwCurrentThread() NtCurrentThread()

/* Access rights. */
#define PROFILE_CONTROL           0x0001
#define PROCESS_QUERY_INFORMATION 0x0400

/* ------------------------------------------------------------------------------------------------------------
 * Structures.
 */

/* One processor group's mask: processors 64*Group .. 64*Group+63 (Linux CPU numbers). Reserved must be 0. */
typedef struct _GROUP_AFFINITY {
    KAFFINITY Mask;
    USHORT Group;
    USHORT Reserved[3];
} GROUP_AFFINITY, *PGROUP_AFFINITY;

typedef struct _CLIENT_ID {
    HANDLE UniqueProcess;
    HANDLE UniqueThread;
} CLIENT_ID, *PCLIENT_ID;

typedef struct _UNICODE_STRING {
    USHORT Length;
    USHORT MaximumLength;
    PWCH Buffer;
} UNICODE_STRING, *PUNICODE_STRING;

typedef struct _OBJECT_ATTRIBUTES {
    ULONG Length;
    HANDLE RootDirectory;
    PUNICODE_STRING ObjectName;
    ULONG Attributes;
    PVOID SecurityDescriptor;
    PVOID SecurityQualityOfService;
} OBJECT_ATTRIBUTES, *POBJECT_ATTRIBUTES;

/* Fill an OBJECT_ATTRIBUTES: InitializeObjectAttributes(&attrs, Name, Attributes, Root, SecurityDescriptor). */
#define InitializeObjectAttributes(p, n, a, r, s)                                                                 \
    do {                                                                                                          \
        (p)->Length = (ULONG)sizeof(OBJECT_ATTRIBUTES);                                                           \
        (p)->RootDirectory = (r);                                                                                 \
        (p)->ObjectName = (n);                                                                                    \
        (p)->Attributes = (ULONG)(a);                                                                             \
        (p)->SecurityDescriptor = (s);                                                                            \
        (p)->SecurityQualityOfService = NULL;                                                                     \
    } while (0)

/* What makes a sample. The values are Windows' (0x00-0x18), the Intel HAL's (0x19-0x1F) and ntprofile's Linux
 * software events (0x10000 and up). ProfileMaximum is a count, not a source. */
typedef enum _KPROFILE_SOURCE {
    ProfileTime = 0x00,
    ProfileAlignmentFixup = 0x01,
    ProfileTotalIssues = 0x02,
    ProfilePipelineDry = 0x03,
    ProfileLoadInstructions = 0x04,
    ProfilePipelineFrozen = 0x05,
    ProfileBranchInstructions = 0x06,
    ProfileTotalNonissues = 0x07,
    ProfileDcacheMisses = 0x08,
    ProfileIcacheMisses = 0x09,
    ProfileCacheMisses = 0x0A,
    ProfileBranchMispredictions = 0x0B,
    ProfileStoreInstructions = 0x0C,
    ProfileFpInstructions = 0x0D,
    ProfileIntegerInstructions = 0x0E,
    Profile2Issue = 0x0F,
    Profile3Issue = 0x10,
    Profile4Issue = 0x11,
    ProfileSpecialInstructions = 0x12,
    ProfileTotalCycles = 0x13,
    ProfileIcacheIssues = 0x14,
    ProfileDcacheAccesses = 0x15,
    ProfileMemoryBarrierCycles = 0x16,
    ProfileLoadLinkedIssues = 0x17,
    ProfileMaximum = 0x18,

    /* Intel HAL sources. */
    ProfileUnhaltedCoreCycles = 0x19,
    ProfileInstructionRetired = 0x1A,
    ProfileUnhaltedReferenceCycles = 0x1B,
    ProfileLLCReference = 0x1C,
    ProfileLLCMisses = 0x1D,
    ProfileBranchInstructionRetired = 0x1E,
    ProfileBranchMispredictsRetired = 0x1F,

    /* Linux software events (ntprofile extension). ProfileLinuxTaskClock's interval is in 100 ns units, the
     * others' in events between samples. */
    ProfileLinuxTaskClock = 0x10000,
    ProfileLinuxPageFaults = 0x10001,
    ProfileLinuxMinorFaults = 0x10002,
    ProfileLinuxMajorFaults = 0x10003,
    ProfileLinuxContextSwitches = 0x10004,
    ProfileLinuxCpuMigrations = 0x10005,
    ProfileLinuxAlignmentFaults = 0x10006,

    /* Raw perf events registered at run time with NtprofileRegisterSource get values in this range. */
    ProfileLinuxRegisteredFirst = 0x20000,
    ProfileLinuxRegisteredLast = 0x2003F
} KPROFILE_SOURCE, *PKPROFILE_SOURCE;

/* What a profile counted (ntprofile extension, see NtprofileQueryStatistics). */
typedef struct _NTPROFILE_STATISTICS {
    ULONGLONG SamplesCounted; /* samples in the range: each incremented one counter */
    ULONGLONG SamplesOutside; /* samples of the profile's source, process and processors outside the range */
    ULONGLONG SamplesLost;    /* samples the kernel dropped because a ring was full */
    ULONGLONG ThrottleEvents; /* times the kernel throttled the event */
} NTPROFILE_STATISTICS, *PNTPROFILE_STATISTICS;

/* How the perf events behind a started profile are laid out (NTPROFILE_EVENT_USAGE.Mode). */
#define NTPROFILE_EVENTS_NONE 0       /* no event: the process has exited */
#define NTPROFILE_EVENTS_THREAD_CPU 1 /* one event per (thread x processor), one ring per processor */
#define NTPROFILE_EVENTS_PER_THREAD 2 /* per thread: an event and a small ring, any processor */
#define NTPROFILE_EVENTS_CPU 3        /* one event per processor for every task (global) */
#define NTPROFILE_EVENTS_CPU_FILTERED 4 /* one event per processor for every task, only the target's samples
                                         * counted (privileged, when threads x processors > 1024) */
#define NTPROFILE_EVENTS_CGROUP 5     /* one event per processor for the tasks of one cgroup, the kernel's filter
                                       * (a sampler of a cgroup, made through the Rust API) */

/* The perf events behind a started profile (ntprofile extension, see NtprofileQueryEventUsage). 32 bytes. */
typedef struct _NTPROFILE_EVENT_USAGE {
    ULONG Mode;            /* NTPROFILE_EVENTS_* */
    ULONG Rings;           /* rings mapped */
    ULONGLONG Descriptors; /* event descriptors held */
    ULONGLONG RingBytes;   /* bytes of the rings' mappings (locked memory) */
    ULONGLONG Threads;     /* threads whose events were opened at the start (later ones inherit them) */
} NTPROFILE_EVENT_USAGE, *PNTPROFILE_EVENT_USAGE;

/* One source of the listing NtprofileQuerySources returns (ntprofile extension), in the spirit of Windows'
 * PROFILE_SOURCE_INFO. 192 bytes. */
typedef struct _NTPROFILE_SOURCE_INFO {
    KPROFILE_SOURCE Source;     /* the value to pass to NtCreateProfile */
    ULONG Supported;            /* 1 when the source can be sampled on this machine, else 0 */
    ULONG OpenErrno;            /* when not supported: the errno perf_event_open(2) gave (0: no perf event);
                                   EACCES for a source sampled in the kernel (context switches, migrations)
                                   when the caller may not sample the kernel: its create gets
                                   STATUS_PRIVILEGE_NOT_HELD */
    ULONG IntervalIsEventCount; /* 0: intervals in 100 ns units; 1: events between samples */
    ULONG MinimumInterval;      /* smallest interval in force now */
    ULONG MaximumInterval;      /* largest interval */
    ULONG Interval;             /* the effective interval now (0 when not supported) */
    ULONG JitterPercent;        /* period jitter in percent (0: fixed period), see NtprofileSetSourceJitter */
    ULONG PerfType;             /* perf_event_attr.type, 0xFFFFFFFF when Linux has no perf event for it */
    ULONG Reserved;
    ULONGLONG PerfConfig;       /* perf_event_attr.config */
    ULONGLONG PerfConfig1;      /* perf_event_attr.config1 */
    ULONGLONG PerfConfig2;      /* perf_event_attr.config2 */
    char Name[64];              /* NUL-terminated: "Timer", "TotalCycles", "task-clock", ... */
    char PerfEventName[64];     /* NUL-terminated perf event name ("cpu-clock", ...), empty when none */
} NTPROFILE_SOURCE_INFO, *PNTPROFILE_SOURCE_INFO;

/* ------------------------------------------------------------------------------------------------------------
 * For code ported from Windows: names it gets from <windows.h>, <ntstatus.h> and <evntrace.h>.
 *
 * Each is skipped when the program already has it, so that a port that defines them elsewhere still compiles:
 *  - a status macro, when that macro is already defined;
 *  - the base types and PROFILE_SOURCE_INFO, all together, when NTPROFILE_NO_WINDOWS_TYPES is defined before
 *    the include, or when a Windows-style <windef.h> or <minwindef.h> (mingw, Wine) was included first
 *    (_WINDEF_, _MINWINDEF_);
 *  - each base type on its own, when the program made its name a macro (#define DWORD uint32_t).
 * When the header declares the base types it defines NTPROFILE_WINDOWS_TYPES, which a program's own definitions
 * after the include can test. Widths are Windows': DWORD is 32 bits (not a C unsigned long on LP64), BOOL an int.
 */
#ifndef STATUS_UNSUCCESSFUL
#define STATUS_UNSUCCESSFUL ((NTSTATUS)0xC0000001L)
#endif
#ifndef STATUS_NO_MEMORY
#define STATUS_NO_MEMORY ((NTSTATUS)0xC0000017L)
#endif

#if !defined(NTPROFILE_NO_WINDOWS_TYPES) && !defined(_WINDEF_) && !defined(_MINWINDEF_)
#define NTPROFILE_WINDOWS_TYPES 1
#ifndef BYTE
typedef unsigned char BYTE;
#endif
#ifndef PBYTE
typedef BYTE *PBYTE;
#endif
#ifndef LPBYTE
typedef BYTE *LPBYTE;
#endif
#ifndef WORD
typedef uint16_t WORD;
#endif
#ifndef PWORD
typedef WORD *PWORD;
#endif
#ifndef DWORD
typedef uint32_t DWORD;
#endif
#ifndef PDWORD
typedef DWORD *PDWORD;
#endif
#ifndef LPDWORD
typedef DWORD *LPDWORD;
#endif
#ifndef DWORD64
typedef uint64_t DWORD64;
#endif
#ifndef DWORD_PTR
typedef ULONG_PTR DWORD_PTR;
#endif
#ifndef BOOL
typedef int BOOL;
#endif
#ifndef PBOOL
typedef BOOL *PBOOL;
#endif
#ifndef LPBOOL
typedef BOOL *LPBOOL;
#endif
#ifndef INT
typedef int INT;
#endif
#ifndef PINT
typedef INT *PINT;
#endif
#ifndef UINT
typedef unsigned int UINT;
#endif
#ifndef PUINT
typedef UINT *PUINT;
#endif
#ifndef LPVOID
typedef void *LPVOID;
#endif
#ifndef LPCVOID
typedef const void *LPCVOID;
#endif
#endif /* NTPROFILE_NO_WINDOWS_TYPES, _WINDEF_, _MINWINDEF_ */

/* PROFILE_SOURCE_INFO is the name Windows gives an entry of its profile-source listing (<evntrace.h>, filled by
 * TraceQueryInformation(TraceProfileSourceListInfo)). Here the name stands for this library's listing entry,
 * NTPROFILE_SOURCE_INFO, filled by NtprofileQuerySources. Its fields differ from Windows' (a fixed 192-byte
 * record: no NextEntryOffset; MinimumInterval/MaximumInterval; a char Name instead of the WCHAR Description), so
 * code that reads Windows' fields fails to compile instead of misreading memory. Skipped with the base types, and
 * when Windows' <evntrace.h> (_EVNTRACE_) was included first. */
#if !defined(NTPROFILE_NO_WINDOWS_TYPES) && !defined(_EVNTRACE_)
typedef NTPROFILE_SOURCE_INFO PROFILE_SOURCE_INFO, *PPROFILE_SOURCE_INFO;
#endif

/* ------------------------------------------------------------------------------------------------------------
 * Layout checks: the library reads and writes these exact widths.
 */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define NTPROFILE_STATIC_ASSERT(cond, name) static_assert(cond, #name)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define NTPROFILE_STATIC_ASSERT(cond, name) _Static_assert(cond, #name)
#else
/* C99 / C++98: a file-scope array typedef whose size is negative when the condition is false. */
#define NTPROFILE_STATIC_ASSERT(cond, name) typedef char ntprofile_static_assert_##name[(cond) ? 1 : -1]
#endif

NTPROFILE_STATIC_ASSERT(sizeof(NTSTATUS) == 4, ntstatus_is_32_bits);
NTPROFILE_STATIC_ASSERT(sizeof(LONG) == 4, long_is_32_bits);
NTPROFILE_STATIC_ASSERT(sizeof(ULONG) == 4, ulong_is_32_bits);
NTPROFILE_STATIC_ASSERT(sizeof(USHORT) == 2, ushort_is_16_bits);
NTPROFILE_STATIC_ASSERT(sizeof(ULONGLONG) == 8, ulonglong_is_64_bits);
NTPROFILE_STATIC_ASSERT(sizeof(KAFFINITY) == sizeof(void *), kaffinity_is_pointer_sized);
NTPROFILE_STATIC_ASSERT(sizeof(SIZE_T) == sizeof(void *), size_t_is_pointer_sized);
NTPROFILE_STATIC_ASSERT(sizeof(HANDLE) == sizeof(void *), handle_is_pointer_sized);
NTPROFILE_STATIC_ASSERT(sizeof(KPROFILE_SOURCE) == 4, kprofile_source_is_32_bits);
NTPROFILE_STATIC_ASSERT(sizeof(GROUP_AFFINITY) == 2 * sizeof(void *), group_affinity_size);
NTPROFILE_STATIC_ASSERT(offsetof(GROUP_AFFINITY, Group) == sizeof(void *), group_affinity_group_offset);
NTPROFILE_STATIC_ASSERT(sizeof(CLIENT_ID) == 2 * sizeof(void *), client_id_size);
NTPROFILE_STATIC_ASSERT(sizeof(NTPROFILE_STATISTICS) == 32, ntprofile_statistics_size);
NTPROFILE_STATIC_ASSERT(sizeof(NTPROFILE_SOURCE_INFO) == 192, ntprofile_source_info_size);
NTPROFILE_STATIC_ASSERT(offsetof(NTPROFILE_SOURCE_INFO, PerfType) == 32, ntprofile_source_info_perf_type);
NTPROFILE_STATIC_ASSERT(offsetof(NTPROFILE_SOURCE_INFO, PerfConfig) == 40, ntprofile_source_info_perf_config);
NTPROFILE_STATIC_ASSERT(offsetof(NTPROFILE_SOURCE_INFO, Name) == 64, ntprofile_source_info_name);
NTPROFILE_STATIC_ASSERT(offsetof(NTPROFILE_SOURCE_INFO, PerfEventName) == 128, ntprofile_source_info_event_name);
#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
NTPROFILE_STATIC_ASSERT(sizeof(GROUP_AFFINITY) == 16, group_affinity_is_16_bytes);
NTPROFILE_STATIC_ASSERT(sizeof(UNICODE_STRING) == 16, unicode_string_is_16_bytes);
NTPROFILE_STATIC_ASSERT(sizeof(OBJECT_ATTRIBUTES) == 48, object_attributes_is_48_bytes);
#endif

#undef NTPROFILE_STATIC_ASSERT

/* ------------------------------------------------------------------------------------------------------------
 * Calls.
 */

/* NtCreateProfile -- create a profile object, stopped, counting samples whose PC lies in
 * [ProfileBase, ProfileBase + ProfileSize) into Buffer[(PC - ProfileBase) >> BucketSize].
 * BucketSize is log2 of the bucket's size in bytes (2..31). Affinity is a processor mask of the caller's
 * current group; (KAFFINITY)-1 means every active processor of that group.
 * Checks, in order: BufferSize 0 (STATUS_INVALID_PARAMETER_7); BucketSize (STATUS_INVALID_PARAMETER); buffer
 * too small (STATUS_BUFFER_TOO_SMALL); range wraps (STATUS_BUFFER_OVERFLOW); source (STATUS_NOT_SUPPORTED);
 * ProfileHandle writable, Buffer 4-byte aligned (STATUS_DATATYPE_MISALIGNMENT) and writable
 * (STATUS_ACCESS_VIOLATION); affinity (STATUS_INVALID_PARAMETER); Process (STATUS_INVALID_HANDLE,
 * STATUS_OBJECT_TYPE_MISMATCH, STATUS_PRIVILEGE_NOT_HELD, STATUS_ACCESS_DENIED).
 * Buffer must stay valid until NtStopProfile / NtClose of the profile has returned. It is never zeroed. */
NTSYSCALLAPI NTSTATUS NTAPI NtCreateProfile(PHANDLE ProfileHandle, HANDLE Process, PVOID ProfileBase,
                                            SIZE_T ProfileSize, ULONG BucketSize, PULONG Buffer, ULONG BufferSize,
                                            KPROFILE_SOURCE ProfileSource, KAFFINITY Affinity);

/* NtCreateProfileEx -- NtCreateProfile with processors given as GroupCount GROUP_AFFINITY records
 * (GroupCount 0: every active processor, resolved at each start; GroupAffinity is then not read). */
NTSYSCALLAPI NTSTATUS NTAPI NtCreateProfileEx(PHANDLE ProfileHandle, HANDLE Process, PVOID ProfileBase,
                                              SIZE_T ProfileSize, ULONG BucketSize, PULONG Buffer,
                                              ULONG BufferSize, KPROFILE_SOURCE ProfileSource, USHORT GroupCount,
                                              PGROUP_AFFINITY GroupAffinity);

/* NtOpenProcess -- open a process for profiling: ClientId->UniqueProcess is a Linux pid (the handle is backed by
 * a pidfd; close it with NtClose). DesiredAccess and ObjectAttributes are accepted and not interpreted
 * (PROCESS_QUERY_INFORMATION and an InitializeObjectAttributes(&attrs, NULL, 0, NULL, NULL) are customary).
 * STATUS_INVALID_CID for a pid that does not exist, STATUS_ACCESS_DENIED when the caller may not profile it.
 * A process that has exited but is not reaped yet (a zombie) opens. */
NTSYSCALLAPI NTSTATUS NTAPI NtOpenProcess(PHANDLE ProcessHandle, ACCESS_MASK DesiredAccess,
                                          POBJECT_ATTRIBUTES ObjectAttributes, PCLIENT_ID ClientId);

/* NtStartProfile -- start sampling. STATUS_PROFILING_NOT_STOPPED if already started. A profile of a process
 * that has exited (a zombie, or reaped while its handle was kept) starts with STATUS_SUCCESS and counts nothing. */
NTSYSCALLAPI NTSTATUS NTAPI NtStartProfile(HANDLE ProfileHandle);

/* NtStopProfile -- stop sampling; on return the counts are complete and the buffer is no longer written.
 * STATUS_PROFILING_NOT_STARTED if not started. */
NTSYSCALLAPI NTSTATUS NTAPI NtStopProfile(HANDLE ProfileHandle);

/* NtQueryIntervalProfile -- the effective interval of a source (source first); 0 for an unsupported source. */
NTSYSCALLAPI NTSTATUS NTAPI NtQueryIntervalProfile(KPROFILE_SOURCE ProfileSource, PULONG Interval);

/* NtSetIntervalProfile -- set a source's interval (interval first), shared by every profile of that source in
 * this process and applied at once; clamped into the source's limits. Always STATUS_SUCCESS. ProfileTime's
 * interval is in 100 ns units, a counter's in events. */
NTSYSCALLAPI NTSTATUS NTAPI NtSetIntervalProfile(ULONG Interval, KPROFILE_SOURCE Source);

/* NtClose -- close a handle; a started profile is stopped first. */
NTSYSCALLAPI NTSTATUS NTAPI NtClose(HANDLE Handle);

/* The Zw aliases: the same functions under their kernel-mode names. */
NTSYSCALLAPI NTSTATUS NTAPI ZwCreateProfile(PHANDLE ProfileHandle, HANDLE Process, PVOID ProfileBase,
                                            SIZE_T ProfileSize, ULONG BucketSize, PULONG Buffer, ULONG BufferSize,
                                            KPROFILE_SOURCE ProfileSource, KAFFINITY Affinity);
NTSYSCALLAPI NTSTATUS NTAPI ZwCreateProfileEx(PHANDLE ProfileHandle, HANDLE Process, PVOID ProfileBase,
                                              SIZE_T ProfileSize, ULONG BucketSize, PULONG Buffer,
                                              ULONG BufferSize, KPROFILE_SOURCE ProfileSource, USHORT GroupCount,
                                              PGROUP_AFFINITY GroupAffinity);
NTSYSCALLAPI NTSTATUS NTAPI ZwOpenProcess(PHANDLE ProcessHandle, ACCESS_MASK DesiredAccess,
                                          POBJECT_ATTRIBUTES ObjectAttributes, PCLIENT_ID ClientId);
NTSYSCALLAPI NTSTATUS NTAPI ZwStartProfile(HANDLE ProfileHandle);
NTSYSCALLAPI NTSTATUS NTAPI ZwStopProfile(HANDLE ProfileHandle);
NTSYSCALLAPI NTSTATUS NTAPI ZwQueryIntervalProfile(KPROFILE_SOURCE ProfileSource, PULONG Interval);
NTSYSCALLAPI NTSTATUS NTAPI ZwSetIntervalProfile(ULONG Interval, KPROFILE_SOURCE Source);
NTSYSCALLAPI NTSTATUS NTAPI ZwClose(HANDLE Handle);

/* NtprofileQueryStatistics (ntprofile extension) -- what a profile counted: samples counted, outside the range,
 * lost and throttle events. Live while started (pending samples are drained first); final after a stop. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileQueryStatistics(HANDLE ProfileHandle, PNTPROFILE_STATISTICS Statistics);

/* NtprofileQueryEventUsage (ntprofile extension) -- the perf events behind a started profile (shared with the
 * other started profiles of its source and process): their layout, descriptors, rings and ring bytes. The layout
 * is chosen at each start from the descriptor and locked-memory budgets and the privilege (NTPROFILE_EVENTS=
 * per-thread, thread-cpu or cpu-filtered in the environment forces one). A per-thread layout opens the events
 * of threads created later as they appear, so its descriptors and rings follow the live threads.
 * STATUS_PROFILING_NOT_STARTED when the profile is not started. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileQueryEventUsage(HANDLE ProfileHandle, PNTPROFILE_EVENT_USAGE Usage);

/* NtprofileQuerySources (ntprofile extension) -- list every source (built-in ones in value order, then the
 * registered raw events). *TotalCount receives the number of sources; when BufferCount is smaller nothing else
 * is written and the call returns STATUS_BUFFER_TOO_SMALL (call with BufferCount 0 to size the buffer). */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileQuerySources(PNTPROFILE_SOURCE_INFO Buffer, ULONG BufferCount,
                                                  PULONG TotalCount);

/* NtprofileRegisterSource (ntprofile extension) -- make a raw perf event (perf_event_attr type, config,
 * config1, config2) a profile source; its value (ProfileLinuxRegisteredFirst and up; the same value for the same
 * event) is written to *Source. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileRegisterSource(ULONG PerfType, ULONGLONG Config, ULONGLONG Config1,
                                                    ULONGLONG Config2, PKPROFILE_SOURCE Source);

/* NtprofileSetSourceJitter (ntprofile extension) -- draw each sample period of a source at random within
 * +/- Percent % of its interval (0: a fixed period), so that periodic workloads cannot alias with the sampler.
 * STATUS_INVALID_PARAMETER above 90, STATUS_NOT_SUPPORTED for a source that cannot be sampled here. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileSetSourceJitter(KPROFILE_SOURCE ProfileSource, ULONG Percent);

/* ------------------------------------------------------------------------------------------------------------
 * Modules and functions to profile (ntprofile extension): what Windows code gets from EnumProcessModules +
 * GetModuleInformation and from the symbol tables, so that a profile covers exactly a module's code or one
 * function instead of a guessed size.
 *
 * ProcessHandle is NtCurrentProcess(), a handle from NtOpenProcess, or NULL for the kernel and its modules (as
 * NtCreateProfile's Process argument: NULL is the system). A process that has exited has no modules.
 */
#ifndef STATUS_NOT_FOUND
#define STATUS_NOT_FOUND               ((NTSTATUS)0xC0000225L)
#endif

/* NTPROFILE_MODULE_INFO.Flags */
#define NTPROFILE_MODULE_LOAD_BIAS_KNOWN 0x1u /* LoadBias is valid (the module's file could be read) */
#define NTPROFILE_MODULE_NAME_ONLY       0x2u /* the path did not fit: FullPathName holds the file name only */
#define NTPROFILE_MODULE_NO_FILE         0x4u /* no file behind it ([vdso], [kernel], a kernel module) */

/* One executable mapping of a module, in the spirit of Windows' MODULEINFO and RTL_PROCESS_MODULE_INFORMATION.
 * 296 bytes, 8-byte aligned. Profile [Base, Base + Size) to profile the module's code. */
typedef struct _NTPROFILE_MODULE_INFO {
    PVOID Base;              /* first address of the mapping */
    SIZE_T Size;             /* its size in bytes */
    ULONGLONG FileOffset;    /* the file offset Base was loaded from */
    ULONGLONG LoadBias;      /* runtime address minus ELF address (st_value + LoadBias = the function's address) */
    ULONG Flags;             /* NTPROFILE_MODULE_* */
    USHORT OffsetToFileName; /* index of the file name in FullPathName */
    USHORT Reserved;
    CHAR FullPathName[256];  /* NUL-terminated: the file's path, or the name of a module without a file */
} NTPROFILE_MODULE_INFO, *PNTPROFILE_MODULE_INFO;

/* NtprofileEnumerateModules -- list the modules of a process: one NTPROFILE_MODULE_INFO per executable mapping,
 * the program first for NtCurrentProcess() (from the dynamic loader), in address order for another process (from
 * /proc/PID/maps), [kernel] then the loaded kernel modules for NULL (from /proc/kallsyms and /proc/modules).
 * Length is the size of Modules in bytes; *ReturnLength receives the bytes the whole list needs. When Length is
 * smaller, nothing else is written and the call returns STATUS_BUFFER_TOO_SMALL: call with Length 0 to size the
 * buffer (and again if the list grew meanwhile). Modules must be 8-byte aligned (STATUS_DATATYPE_MISALIGNMENT) and
 * writable (STATUS_ACCESS_VIOLATION). STATUS_ACCESS_DENIED when another process's mappings may not be read,
 * STATUS_PRIVILEGE_NOT_HELD for NULL when the kernel hides its addresses from the caller. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileEnumerateModules(HANDLE ProcessHandle, PNTPROFILE_MODULE_INFO Modules,
                                                      ULONG Length, PULONG ReturnLength);

/* NtprofileFindFunction -- the exact range of a function by name: *Base = its address in the process (the ELF
 * symbol's st_value plus the module's load bias), *Size = its st_size, from .symtab then .dynsym. ModuleName is a
 * file name ("libm.so.6"), the file name up to a dot ("libm"), or a path; NULL searches every module in order
 * (for NULL ProcessHandle: /proc/kallsyms, ModuleName "[kernel]" or a kernel module's name). FunctionName is the
 * symbol's name ("cos", a C function, a mangled C++ name) or a Rust path without its hash ("crate::f"); only the
 * default version of a versioned symbol is found. Writes *Base and *Size only on success. STATUS_NOT_FOUND when
 * no such module or function exists (also for an indirect function, STT_GNU_IFUNC, whose symbol is its resolver:
 * profile its module instead), STATUS_INVALID_PARAMETER for a NULL FunctionName or a name over 4096 bytes. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileFindFunction(HANDLE ProcessHandle, PCSTR ModuleName, PCSTR FunctionName,
                                                  PVOID *Base, PSIZE_T Size);

#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu && (defined(__cplusplus) && __cplusplus >= 201103L)
static_assert(sizeof(NTPROFILE_MODULE_INFO) == 296, "ntprofile_module_info_size");
static_assert(offsetof(NTPROFILE_MODULE_INFO, FullPathName) == 40, "ntprofile_module_info_path");
#elif UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(NTPROFILE_MODULE_INFO) == 296, "ntprofile_module_info_size");
_Static_assert(offsetof(NTPROFILE_MODULE_INFO, FullPathName) == 40, "ntprofile_module_info_path");
#endif

/* ------------------------------------------------------------------------------------------------------------
 * The sampler (ntprofile extension): perf_event sampling of whole process trees, or of everything, that hands
 * the caller every decoded record -- samples (pid, tid, time, CPU, ip, optional call chain, optional user
 * registers and user-stack copy) and side-band records (executable mappings, comm/exec, fork, exit, lost,
 * throttle). For profilers that follow a process's children, exec and dlopen, and keep call stacks; the NT calls
 * above keep their meaning (a profile on a process counts that process only). The caller drives the reading:
 * records are delivered on the caller's thread, inside NtprofileReadSampler. docs/api.md section 8 has the
 * details (checks, record fields, ordering, lifetimes).
 */

/* NTPROFILE_SAMPLER_CONFIG.Flags */
#define NTPROFILE_SAMPLER_INHERIT   0x00000001u /* follow the processes the targets create (fork, exec, ...) */
#define NTPROFILE_SAMPLER_GLOBAL    0x00000002u /* every process; ProcessCount must be 0 */
#define NTPROFILE_SAMPLER_KERNEL    0x00000004u /* kernel samples too (CAP_PERFMON or perf_event_paranoid <= 1) */
#define NTPROFILE_SAMPLER_SIDEBAND  0x00000008u /* mmap, comm, fork, exit records */
#define NTPROFILE_SAMPLER_SWITCH    0x00000010u /* a Switch record at each context switch of a target thread */

typedef struct _NTPROFILE_SAMPLER_CONFIG {
    ULONG Size;              /* sizeof(NTPROFILE_SAMPLER_CONFIG); else STATUS_INVALID_PARAMETER */
    ULONG Flags;             /* NTPROFILE_SAMPLER_* */
    KPROFILE_SOURCE Source;
    ULONG Interval;          /* 0 = the source's current interval (as Rust's .interval(0)); else clamped as
                                NtSetIntervalProfile does */
    ULONG ProcessCount;      /* 0 and no GLOBAL flag = the current process */
    ULONG Reserved0;         /* 0 */
    const ULONG *ProcessIds; /* ProcessCount Linux pids */
    KAFFINITY Affinity;      /* processors of group 0; 0 = every online processor */
    USHORT MaxCallchain;     /* 0 = no call chain; else at most this many addresses (capped by the kernel), and
                                the context markers besides (see CallchainCount) */
    USHORT Reserved1;        /* 0 */
    ULONG UserStackSize;     /* 0 = no user stack copy; else bytes per sample (rounded to 8, at most 65528) */
    ULONG RingPages;         /* data pages per CPU ring, a power of two that holds two of the largest samples and a
                                Lost record (1 page without a stack copy, 64 with UserStackSize 65528; see
                                docs/api.md section 8, "Rings"), else STATUS_INVALID_PARAMETER; 0 = the default.
                                Every CPU's ring has the same size, halved together while locked memory is short */
    ULONG Reserved2;         /* 0 */
} NTPROFILE_SAMPLER_CONFIG, *PNTPROFILE_SAMPLER_CONFIG;

typedef enum _NTPROFILE_RECORD_TYPE {
    NtprofileRecordSample = 1,
    NtprofileRecordMmap,
    NtprofileRecordComm,
    NtprofileRecordFork,
    NtprofileRecordExit,
    NtprofileRecordLost,
    NtprofileRecordThrottle,
    NtprofileRecordUnthrottle,
    NtprofileRecordSwitch     /* NTPROFILE_SAMPLER_SWITCH: Pid/Tid left (SWITCH_OUT) or reached CPU Cpu at Time */
} NTPROFILE_RECORD_TYPE;

/* NTPROFILE_RECORD.Flags */
#define NTPROFILE_RECORD_KERNEL   0x1u /* Sample: the ip is in the kernel. A context-switch or migration sample
                                          of a sampler without NTPROFILE_SAMPLER_KERNEL is reported at the user
                                          address where the thread entered the kernel (Address == UserIp,
                                          HAS_REGS set, KERNEL clear); docs/linux-mapping.md */
#define NTPROFILE_RECORD_EXEC     0x2u /* Comm: the comm changed because of an exec */
#define NTPROFILE_RECORD_HAS_REGS 0x4u /* Sample: UserIp, UserSp and UserBp are valid */
#define NTPROFILE_RECORD_SWITCH_OUT 0x8u /* Switch: the thread left the CPU (else it came onto it) */
#define NTPROFILE_RECORD_PREEMPT  0x10u /* Switch out: the thread was still runnable (preempted, involuntary) */

typedef struct _NTPROFILE_RECORD {
    ULONG Type;               /* NTPROFILE_RECORD_TYPE */
    ULONG Flags;              /* NTPROFILE_RECORD_* */
    ULONG Pid;
    ULONG Tid;
    ULONG ParentPid;          /* Fork, Exit: the parent's pid (a new thread has ParentPid == Pid) */
    ULONG ParentTid;          /* Fork, Exit: the parent's tid */
    ULONG Cpu;                /* Sample, Switch: the CPU */
    ULONG Reserved;
    ULONGLONG Time;           /* CLOCK_MONOTONIC nanoseconds */
    ULONGLONG Address;        /* Sample: ip; Mmap: start */
    ULONGLONG Length;         /* Mmap: length; Lost: records the ring lost that no earlier Lost record reported */
    ULONGLONG Offset;         /* Mmap: file offset (pgoff) */
    ULONG Protection;         /* Mmap: PROT_* */
    ULONG MapFlags;           /* Mmap: MAP_* */
    ULONG CallchainCount;     /* entries at Callchain: at most MaxCallchain addresses plus the kernel's context
                                 markers (one before each part: kernel, user), so up to MaxCallchain + 2 */
    ULONG StackSize;          /* bytes at Stack */
    const ULONGLONG *Callchain; /* raw, with the kernel's PERF_CONTEXT_* markers; NULL when empty */
    ULONGLONG UserIp, UserSp, UserBp; /* valid with NTPROFILE_RECORD_HAS_REGS; Stack starts at UserSp */
    const UCHAR *Stack;       /* the user stack copy; NULL when empty */
    const char *Name;         /* Comm: the command; Mmap: the file name; NUL-terminated; NULL otherwise */
    ULONG NameLength;         /* bytes of Name before its NUL */
    ULONG Reserved2;
} NTPROFILE_RECORD, *PNTPROFILE_RECORD;

/* Called for each record, on the caller's thread, inside NtprofileReadSampler. The record and everything it
 * points to live only during the call: copy what you keep. The routine must return normally: never leave it
 * with longjmp, a C++ exception or pthread_exit: the read is then half-way through a ring with state that only
 * a normal return puts back, and jumping over the library's frames is undefined behaviour. After fork() inside
 * the routine, the child must not read Callchain or Stack (they point into the parent's rings, not mapped in the
 * child); the child's read returns STATUS_INVALID_HANDLE once the routine returns. */
typedef VOID (NTAPI *PNTPROFILE_RECORD_ROUTINE)(const NTPROFILE_RECORD *Record, PVOID Context);

typedef struct _NTPROFILE_SAMPLER_STATISTICS {
    ULONGLONG Records;        /* records delivered */
    ULONGLONG Samples;        /* Sample records delivered */
    ULONGLONG Lost;           /* records the kernel could not write (a full ring), counted from the kernel's own
                                 per-event count where it has one (Linux 6.0+): Samples + Lost is what it took */
    ULONGLONG Throttled;      /* throttle records */
    ULONGLONG Unthrottled;    /* unthrottle records */
    ULONG TargetsExited;      /* 1 when every target process (and, with INHERIT, its descendants) has exited */
    ULONG EventMode;          /* the layout of its events, NTPROFILE_EVENTS_*: THREAD_CPU (processes), CPU_FILTERED
                                 (processes, privileged, threads x processors above 1,024: one event per processor
                                 for every task, only the targets' records delivered), PER_THREAD (processes,
                                 unprivileged, threads x processors above 1,024 on more than two processors: one
                                 event and ring per thread, tasks created later opened as reads find their fork
                                 records, what they ran before reported lost), CPU (global) */
} NTPROFILE_SAMPLER_STATISTICS, *PNTPROFILE_SAMPLER_STATISTICS;

/* NtprofileCreateSampler -- open a sampler's events, disabled, and write its handle. The checks, in the order
 * they run (a call with several faults gets the status of the first it fails):
 *  1. SamplerHandle not writable -> STATUS_ACCESS_VIOLATION (no alignment rule, as for NtCreateProfile's
 *     ProfileHandle: a misaligned SamplerHandle is written all the same);
 *  2. Config NULL -> STATUS_INVALID_PARAMETER; misaligned (not 8-byte aligned) -> STATUS_DATATYPE_MISALIGNMENT;
 *     not readable over all sizeof(NTPROFILE_SAMPLER_CONFIG) bytes -> STATUS_ACCESS_VIOLATION (whatever Size
 *     says); Size wrong -> STATUS_INVALID_PARAMETER;
 *  3. an unknown flag or a non-zero Reserved field, GLOBAL with ProcessCount, more than 65536 pids, ProcessIds
 *     NULL with a count -> STATUS_INVALID_PARAMETER;
 *  4. ProcessIds misaligned (not 4-byte aligned) -> STATUS_DATATYPE_MISALIGNMENT; not readable ->
 *     STATUS_ACCESS_VIOLATION;
 *  5. Source a value that is no source -> STATUS_NOT_SUPPORTED;
 *  6. RingPages not a power of two up to 2^20 or too small for two of the largest samples and a Lost record,
 *     UserStackSize above 65528, Affinity naming a processor that is not online -> STATUS_INVALID_PARAMETER;
 *  7. a known source that cannot be sampled here -> STATUS_NOT_SUPPORTED, or STATUS_PRIVILEGE_NOT_HELD for a
 *     source sampled in the kernel (ProfileLinuxContextSwitches, ProfileLinuxCpuMigrations) when the caller
 *     may not sample the kernel;
 *  8. GLOBAL or KERNEL without the privilege -> STATUS_PRIVILEGE_NOT_HELD;
 *  9. the pids: no such pid -> STATUS_INVALID_CID; a process the caller may not profile ->
 *     STATUS_ACCESS_DENIED;
 * 10. descriptors, memory or ring memory ran out -> STATUS_INSUFFICIENT_RESOURCES.
 * So an unknown Source comes before a bad RingPages or Affinity, a misaligned ProcessIds before a bad RingPages,
 * a misaligned Config before its Size. A target that exits before or during the call is no error:
 * TargetsExited is then 1. Interval 0 is the source's current interval (as Interval(0) in Rust). A sampler of
 * the current process never samples the library's own threads (they are started before its events open and
 * kept while it lives). Close it with NtClose. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileCreateSampler(PHANDLE SamplerHandle, const NTPROFILE_SAMPLER_CONFIG *Config);

/* NtprofileEnableSampler -- start (Enable TRUE) or stop (FALSE) sampling; records already written stay
 * readable. For this call, NtprofileReadSampler and NtprofileQuerySamplerStatistics: a profile or process handle,
 * or the pseudo-handles NtCurrentProcess() and NtCurrentThread(), -> STATUS_OBJECT_TYPE_MISMATCH (as
 * NtStartProfile answers for them); a closed or unknown handle -> STATUS_INVALID_HANDLE. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileEnableSampler(HANDLE SamplerHandle, BOOLEAN Enable);

/* NtprofileReadSampler -- wait up to TimeoutMilliseconds (0 = do not wait) until a ring holds a quarter of its
 * size, every target exited, or the timeout; then drain every ring once, calling Routine(Record, Context) for
 * each record (records of one ring in order; across rings, order them by Time). A NULL Routine drains and
 * counts only. *RecordCount (optional) receives the number of records. Pointers in a record live only during
 * the call. A call on the same sampler from inside Routine (other than NtClose) returns
 * STATUS_INVALID_PARAMETER. The wait holds no lock: other threads' NtprofileQuerySamplerStatistics and
 * NtprofileEnableSampler answer during it, and NtClose of the handle ends it at once (any timeout, 0xFFFFFFFF
 * included) with STATUS_INVALID_HANDLE. In a fork()ed child (fork() inside Routine included) it returns
 * STATUS_INVALID_HANDLE. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileReadSampler(HANDLE SamplerHandle, ULONG TimeoutMilliseconds,
                                                 PNTPROFILE_RECORD_ROUTINE Routine, PVOID Context,
                                                 PULONG RecordCount);

/* NtprofileQuerySamplerStatistics -- the sampler's counts so far and whether every target exited. */
NTSYSCALLAPI NTSTATUS NTAPI NtprofileQuerySamplerStatistics(HANDLE SamplerHandle,
                                                            NTPROFILE_SAMPLER_STATISTICS *Statistics);

/* NtprofileReadBlockedThread -- where thread Tid of process Pid waits, without stopping it (for off-CPU
 * profilers: call it at the thread's Switch-out record). Reads /proc/PID/task/TID/syscall and copies up to
 * StackBufferSize bytes of its user stack from UserSp (process_vm_readv); needs the right to trace the thread
 * (same user). STATUS_SUCCESS with NTPROFILE_BLOCKED_RUNNING when the thread runs, ran during the reading (its
 * wait is over: a copy never mixes two moments of its stack) or is the calling thread itself. The frame
 * pointer is not readable this way: unwind the stack with CFI. Errors, in order: Info NULL ->
 * STATUS_ACCESS_VIOLATION, misaligned -> STATUS_DATATYPE_MISALIGNMENT, not writable -> STATUS_ACCESS_VIOLATION;
 * StackBuffer NULL with a size -> STATUS_INVALID_PARAMETER, not writable -> STATUS_ACCESS_VIOLATION (any
 * alignment is fine; NULL with size 0 copies nothing); no thread to read (it exited, is a zombie, or is a
 * kernel thread) -> STATUS_INVALID_CID; not allowed -> STATUS_ACCESS_DENIED. */
#define NTPROFILE_BLOCKED_IN_SYSCALL 0x1u /* Syscall and Arguments are valid */
#define NTPROFILE_BLOCKED_RUNNING    0x2u /* the thread was running: nothing else is valid */

typedef struct _NTPROFILE_BLOCKED_THREAD {
    ULONG Flags;              /* NTPROFILE_BLOCKED_* */
    ULONG Reserved;
    ULONGLONG Syscall;        /* the system call's number (the architecture's table) */
    ULONGLONG Arguments[6];
    ULONGLONG UserIp, UserSp; /* at the kernel entry; StackBuffer holds the stack from UserSp */
    ULONG StackSize;          /* bytes written to StackBuffer (at most 1 MiB per call) */
    ULONG Reserved2;
} NTPROFILE_BLOCKED_THREAD, *PNTPROFILE_BLOCKED_THREAD;

NTSYSCALLAPI NTSTATUS NTAPI NtprofileReadBlockedThread(ULONG Pid, ULONG Tid, PVOID StackBuffer,
                                                       ULONG StackBufferSize, NTPROFILE_BLOCKED_THREAD *Info);

#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu && (defined(__cplusplus) && __cplusplus >= 201103L)
static_assert(sizeof(NTPROFILE_SAMPLER_CONFIG) == 56, "ntprofile_sampler_config_size");
static_assert(offsetof(NTPROFILE_SAMPLER_CONFIG, ProcessIds) == 24, "ntprofile_sampler_config_pids");
static_assert(offsetof(NTPROFILE_SAMPLER_CONFIG, MaxCallchain) == 40, "ntprofile_sampler_config_callchain");
static_assert(sizeof(NTPROFILE_RECORD) == 136, "ntprofile_record_size");
static_assert(offsetof(NTPROFILE_RECORD, Callchain) == 80, "ntprofile_record_callchain");
static_assert(offsetof(NTPROFILE_RECORD, Name) == 120, "ntprofile_record_name");
static_assert(sizeof(NTPROFILE_SAMPLER_STATISTICS) == 48, "ntprofile_sampler_statistics_size");
static_assert(sizeof(NTPROFILE_BLOCKED_THREAD) == 88, "ntprofile_blocked_thread_size");
#elif UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(NTPROFILE_SAMPLER_CONFIG) == 56, "ntprofile_sampler_config_size");
_Static_assert(offsetof(NTPROFILE_SAMPLER_CONFIG, ProcessIds) == 24, "ntprofile_sampler_config_pids");
_Static_assert(offsetof(NTPROFILE_SAMPLER_CONFIG, MaxCallchain) == 40, "ntprofile_sampler_config_callchain");
_Static_assert(sizeof(NTPROFILE_RECORD) == 136, "ntprofile_record_size");
_Static_assert(offsetof(NTPROFILE_RECORD, Callchain) == 80, "ntprofile_record_callchain");
_Static_assert(offsetof(NTPROFILE_RECORD, Name) == 120, "ntprofile_record_name");
_Static_assert(sizeof(NTPROFILE_SAMPLER_STATISTICS) == 48, "ntprofile_sampler_statistics_size");
_Static_assert(sizeof(NTPROFILE_BLOCKED_THREAD) == 88, "ntprofile_blocked_thread_size");
#endif

/* NtprofileStatusMessage (ntprofile extension) -- what a status means: a static NUL-terminated sentence that
 * starts with the status's NT name, e.g. "STATUS_BUFFER_TOO_SMALL: the buffer cannot hold one ULONG counter per
 * bucket of the range (or the listing)". The same text the Rust API's errors give. A value the library does not
 * define gets a generic text for its severity; the result is never NULL and must not be freed or modified. */
NTSYSCALLAPI const char *NTAPI NtprofileStatusMessage(NTSTATUS Status);

/* RtlNtStatusToDosError -- the Win32 error code (a GetLastError value) Windows maps a status to, for every
 * status this library returns: STATUS_SUCCESS 0, STATUS_ACCESS_VIOLATION and STATUS_DATATYPE_MISALIGNMENT 998
 * (ERROR_NOACCESS), STATUS_INVALID_HANDLE and STATUS_OBJECT_TYPE_MISMATCH 6 (ERROR_INVALID_HANDLE),
 * STATUS_INVALID_PARAMETER, STATUS_INVALID_PARAMETER_7 and STATUS_INVALID_CID 87 (ERROR_INVALID_PARAMETER),
 * STATUS_ACCESS_DENIED 5, STATUS_BUFFER_TOO_SMALL 122, STATUS_BUFFER_OVERFLOW 234 (ERROR_MORE_DATA),
 * STATUS_PRIVILEGE_NOT_HELD 1314, STATUS_INSUFFICIENT_RESOURCES 1450, STATUS_NOT_SUPPORTED 50,
 * STATUS_INTERNAL_ERROR 1359, STATUS_NOT_FOUND 1168, STATUS_UNSUCCESSFUL 31, STATUS_NO_MEMORY 8; the three
 * profiling statuses (NOT_STARTED, NOT_STOPPED, AT_LIMIT) have no Win32 equivalent and give 317
 * (ERROR_MR_MID_NOT_FOUND), as on Windows. Other values: 0 and customer values (bit 29 set) come back unchanged,
 * 0x8007xxxx and 0xC001xxxx give their low 16 bits, anything else 317. Also records Status as the calling
 * thread's last status (RtlGetLastNtStatus). The table is in docs/api.md, "Status to Win32 error". */
NTSYSAPI ULONG NTAPI RtlNtStatusToDosError(NTSTATUS Status);

/* RtlNtStatusToDosErrorNoTeb -- the same conversion, without recording the status. */
NTSYSAPI ULONG NTAPI RtlNtStatusToDosErrorNoTeb(NTSTATUS Status);

/* RtlGetLastNtStatus -- the last status the calling thread passed to RtlNtStatusToDosError (0 before any). The
 * profiling calls do not set it (on Windows neither do the system calls). */
NTSYSAPI NTSTATUS NTAPI RtlGetLastNtStatus(VOID);

#ifdef __cplusplus
}
#endif

#endif /* NTPROFILE_H */
