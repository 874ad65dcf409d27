#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension AtomicFile {
    /// The suffix of the temporary files ``write(_:to:)-(UnsafeRawBufferPointer,_)`` and
    /// Concord's coordinated writes make: `.NAME.RANDOM.concord-tmp` beside the file NAME.
    public static let temporarySuffix = ".concord-tmp"

    /// Removes Concord's temporary files in `directory` left by writes a crash or a kill
    /// interrupted: those whose name starts with `prefix` (`.NAME.` for the temporaries of the
    /// file NAME; `.` for every one) and ends with ``temporarySuffix``, that are regular files
    /// not modified for `age` seconds before `now` (seconds since the epoch). A write in progress
    /// touches its temporary as it goes and renames it within moments, so another process's live
    /// one is never that old. Returns the paths removed; one that cannot be removed (or listed) is
    /// left where it is, harmless.
    @discardableResult
    public static func removeStaleTemporaries(
        in directory: String,
        prefix: String,
        olderThan age: Double,
        now: Double
    ) -> [String] {
        let names = (try? FileSystem.directoryEntries(at: directory)) ?? []
        let candidates = names.filter { name in
            name.hasPrefix(prefix) && name.hasPrefix(".") && name.hasSuffix(temporarySuffix)
        }.map { directory + "/" + $0 }
        var removed: [String] = []
        for path in candidates.sorted() {
            guard let identity = try? FileSystem.identity(at: path), identity.kind == .regular else { continue }
            let modified = Double(identity.modificationSeconds) + Double(identity.modificationNanoseconds) / 1e9
            guard now - modified >= age else { continue }
            if (try? FileSystem.removeFile(at: path)) != nil { removed.append(path) }
        }
        return removed
    }
}
