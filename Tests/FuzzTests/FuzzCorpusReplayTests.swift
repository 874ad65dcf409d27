import Foundation
import FuzzTargets
import Testing

/// The fuzzers' corpus and every crash they ever found, replayed through the same entry points
/// the fuzzers call (no fuzzer build needed): nothing crashes, every round-trip property holds,
/// and bad input is refused with a typed error that names its file.
@Suite("Fuzz corpus replay")
struct FuzzCorpusReplayTests {
    /// The repository's `Fuzz` folder.
    static let fuzzFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz", isDirectory: true)

    /// The regular files in `folder` (none if it is missing), sorted, without `.gitkeep`.
    static func files(in folder: URL) -> [URL] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map {
            folder.appendingPathComponent($0, isDirectory: false)
        }
    }

    @Test("Every target has a seed corpus and a crash folder")
    func everyTargetHasItsFolders() {
        for target in FuzzTarget.all {
            let corpus = Self.fuzzFolder.appendingPathComponent("Corpus/\(target.name)", isDirectory: true)
            let crashes = Self.fuzzFolder.appendingPathComponent("Crashes/\(target.name)", isDirectory: true)
            #expect(!Self.files(in: corpus).isEmpty, "no seed corpus in \(corpus.path)")
            #expect(FileManager.default.fileExists(atPath: crashes.path), "no crash folder \(crashes.path)")
        }
    }

    // Serialized: the targets that go through files share one scratch folder, removed after each.
    @Test(
        "Corpus and crashes replay: no crash, round trips hold, bad input names its file",
        .serialized,
        arguments: FuzzTarget.all.map(\.name)
    )
    func replay(_ name: String) throws {
        let target = try #require(FuzzTarget.named(name))
        defer { FuzzScratch.removeAll() }
        var decoded = 0
        var rejected = 0
        for folder in ["Corpus", "Crashes"] {
            for url in Self.files(in: Self.fuzzFolder.appendingPathComponent("\(folder)/\(name)", isDirectory: true)) {
                let data = try Data(contentsOf: url)
                let outcome: FuzzOutcome
                do {
                    outcome = try target.run(data, url: url)
                } catch {
                    Issue.record("\(url.path): \(error)")
                    continue
                }
                switch outcome {
                case .decoded:
                    decoded += 1
                case .rejected(let error, let namedFile):
                    rejected += 1
                    if let namedFile {
                        #expect(
                            "\(error)".contains(namedFile.lastPathComponent),
                            "\(url.path): the error does not name \(namedFile.path): \(error)"
                        )
                    }
                }
            }
        }
        // The seeds are real files: at least one of them decodes.
        #expect(decoded > 0, "\(name): nothing in the corpus decodes (\(rejected) rejected)")
    }
}
