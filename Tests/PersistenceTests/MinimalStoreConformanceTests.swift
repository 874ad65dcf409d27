import Persistence
import StoreConformance
import Testing

@Suite("Minimal store conformance")
struct MinimalStoreConformanceTests {
    /// The minimal store does not present its files, so the event checks do not apply to it.
    static let options = StoreOptions(presentsFiles: false)

    @Test("Minimal store passes the store-plugin contract", arguments: StoreConformance.checkNames)
    func conformance(_ check: String) throws {
        try StoreConformance(storeType: MinimalStore.self, options: Self.options).run(check)
    }

    @Test("An unknown check name fails, naming the known ones")
    func unknownCheck() {
        #expect(throws: ConformanceFailure.self) {
            try StoreConformance(storeType: MinimalStore.self, options: Self.options).run("no such check")
        }
    }
}
