import ConcordTestSupport
import Foundation
import Testing

@testable import notes

/// Temporaries that interrupted writes left beside a store file are removed when the store
/// opens; a write in progress is never taken for one: a temporary touched within the last
/// minute stays (the first test fails with no age bound).
@Suite("Stale temporaries in a data folder", .serialized)
struct TemporarySweepTests {
    let directory = TemporaryDirectory("temporary-sweep")

    func place(_ folder: URL, _ name: String, modified: Date?) throws -> URL {
        let url = folder.appendingPathComponent(name)
        try Data("left by a kill".utf8).write(to: url)
        if let modified { try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: url.path) }
        return url
    }

    @Test(
        "a store's stale temporaries go when it opens; fresh ones and other files' stay",
        arguments: ["json", "plist"]
    )
    func staleTemporariesOfTheStoreRemoved(store: String) throws {
        let data = directory(store)
        let created = try NotesProcess.run(["add", "x", "--store", store, "--data", data.path, "--create", "--offline"])
        #expect(created.status == 0, "\(created.errors)")
        let file = "notes.\(store)"
        let old = Date().addingTimeInterval(-3_600)
        let stale = try place(data, ".\(file).1234.concord-tmp", modified: old)
        let fresh = try place(data, ".\(file).5678.concord-tmp", modified: nil)
        let another = try place(data, ".settings.json.42.concord-tmp", modified: old)
        let listed = try NotesProcess.run(["list", "--store", store, "--data", data.path, "--offline"])
        #expect(listed.status == 0 && listed.lines.count == 1, "\(listed.errors) \(listed.lines)")
        #expect(!FileManager.default.fileExists(atPath: stale.path), "the stale temporary was left")
        for url in [fresh, another] {
            #expect(FileManager.default.fileExists(atPath: url.path), "\(url.lastPathComponent) was removed")
        }
    }

    @Test(
        "processes that add to one store at once, each opening it (and sweeping) while the others write, lose nothing"
    )
    func racingProcessesLoseNothing() throws {
        let data = directory("race")
        let created = try NotesProcess.run([
            "add", "first", "--store", "json", "--data", data.path, "--create", "--offline",
        ])
        #expect(created.status == 0, "\(created.errors)")
        let failures = Failures()
        let group = DispatchGroup()
        for writer in 0..<3 {
            group.enter()
            Thread.detachNewThread {
                for number in 0..<6 {
                    let outcome = try? NotesProcess.run([
                        "add", "w\(writer)-\(number)", "--data", data.path, "--offline",
                    ])
                    if outcome?.status != 0 {
                        failures.add("w\(writer)-\(number): \(outcome?.errors ?? "did not start")")
                    }
                }
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + .seconds(240)) == .success, "the writers did not finish")
        #expect(failures.all.isEmpty, "\(failures.all)")
        let listed = try NotesProcess.run(["list", "--data", data.path, "--offline"])
        #expect(listed.lines.count == 19, "\(listed.lines.count) notes: \(listed.lines)")
        let left = try FileManager.default.contentsOfDirectory(atPath: data.path).filter {
            $0.hasSuffix(".concord-tmp")
        }
        #expect(left.isEmpty, "temporaries left: \(left)")
    }
}

/// Failures that threads report.
final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []
    func add(_ failure: String) { lock.withLock { list.append(failure) } }
    var all: [String] { lock.withLock { list } }
}
