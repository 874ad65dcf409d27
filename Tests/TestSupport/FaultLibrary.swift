import Foundation

/// Tests/Crash/crashpoint.c, the `LD_PRELOAD` library that kills a process at, or fails, one
/// aimed system call (its `CONCORD_CRASH_*` variables say which).
public enum FaultLibrary {
    /// The library did not build.
    public struct BuildFailure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Builds the library into `directory` (with the clang beside swift, as `make crash` builds
    /// it); returns its path.
    public static func build(in directory: TemporaryDirectory) throws -> String {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let library = directory.url.appendingPathComponent("libconcord-crashpoint.so").path
        let swift = ["/usr/bin/swift", "/opt/swift/usr/bin/swift"].first { FileManager.default.fileExists(atPath: $0) }
        let beside = swift.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath().deletingLastPathComponent() }
        let clang =
            beside.map { $0.appendingPathComponent("clang").path }
            .flatMap { FileManager.default.isExecutableFile(atPath: $0) ? $0 : nil } ?? "/usr/bin/cc"
        let build = try Subprocess(
            clang,
            [
                "-O1", "-shared", "-fPIC", "-o", library,
                repository.appendingPathComponent("Tests/Crash/crashpoint.c").path, "-ldl",
            ],
            captureStandardError: true
        )
        let ended = build.wait(timeout: .seconds(60))
        guard ended == .exited(0) else {
            throw BuildFailure(description: "building the fault library: \(build.readStandardError())")
        }
        return library
    }
}
